"""Prints the prefix of the UCX wheel (libucx-cu12/-cu13) installed in this Python."""
import os

import libucx

print(os.path.dirname(libucx.__file__))
