/* A port for the bootstrap store that the C tests' ranks meet on (COMMUX_BOOTSTRAP). */
#ifndef COMMUX_TESTS_C_RESERVE_PORT_H
#define COMMUX_TESTS_C_RESERVE_PORT_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rank_checks.h"

/* A port for the bootstrap store, kept reserved: the socket stays bound (SO_REUSEADDR, not
 * listening) until the job ends, so the kernel hands it to nobody else (as an outgoing
 * connection's port, say) while rank 0's store, which also sets SO_REUSEADDR, listens on it.
 * A port that was only free a moment ago was once taken in between (CI, under ASan). */
/* The low end of the kernel's ephemeral port range (32768 if it cannot be read). */
static inline int ephemeral_low(void) {
  int low = 32768, high = 0;
  FILE* f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  if (f != NULL) {
    if (fscanf(f, "%d %d", &low, &high) != 2) low = 32768;
    fclose(f);
  }
  return low;
}

static inline int reserve_port(int* held) {
  /* Below the ephemeral range where there is room: a port in it can also go to another
   * process's bind to port 0 with SO_REUSEADDR (UCX's listeners among them), which then
   * listens on it before rank 0 does (EADDRINUSE in CI, twice). A port below the range is
   * only taken by a process that names it. */
  const int low = ephemeral_low();
  unsigned long pick = g_seed ^ ((unsigned long)getpid() << 16);
  for (int attempt = 0; attempt < 64; ++attempt) {
    int port = 0; /* the last attempt: any port the kernel gives */
    if (low > 12000 && attempt < 63) {
      pick = pick * 6364136223846793005UL + 1442695040888963407UL;
      port = 10000 + (int)((pick >> 33) % (unsigned long)(low - 10000));
    }
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    socklen_t len = sizeof(a);
    if (s < 0) fail("no socket: %s", strerror(errno));
    if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(s, (struct sockaddr*)&a, sizeof(a)) != 0 ||
        getsockname(s, (struct sockaddr*)&a, &len) != 0) {
      close(s);
      continue;
    }
    *held = s;
    return ntohs(a.sin_port);
  }
  fail("no free port: %s", strerror(errno));
  return -1;
}

#endif
