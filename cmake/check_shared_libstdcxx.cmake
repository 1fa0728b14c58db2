# Run after linking a library (cmake -DLIBRARY=... -DREADELF=... -P this file): fail when it
# does not load the C++ standard library as a shared library. A toolchain that links
# libstdc++ statically (-static-libstdc++, or a compiler whose own library folder holds only
# libstdc++.a) puts a second copy of it beside the one torch loads; the two copies' locale
# tables then clash, and the first iostream commux uses crashes the process (seen on a GPU
# machine whose /opt/gcc wrapper did this).
execute_process(COMMAND "${READELF}" -d "${LIBRARY}" OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(WARNING "commux: cannot read the dynamic section of ${LIBRARY}; not checked")
elseif(NOT dynamic MATCHES "NEEDED[^\n]*lib(std)?c\\+\\+\\.so")
  file(REMOVE "${LIBRARY}")  # or the next build would find it up to date and pass
  message(FATAL_ERROR
    "commux: ${LIBRARY} does not load libstdc++ as a shared library: this C++ compiler "
    "linked it statically, and a second copy beside torch's crashes at run time. Build with "
    "a compiler that links it dynamically, e.g. the distribution's: CXX=/usr/bin/g++ "
    "(and remove the build folder, since CMake keeps the compiler it first found).")
endif()
