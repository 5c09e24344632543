/* LD_PRELOAD into the Flink JVMs of a streams run (harness/streams/cluster.py): a bind() to the
 * wildcard address (0.0.0.0 or ::) binds loopback instead (127.0.0.1 or ::1). Flink's Prometheus
 * reporter has no host setting and listens on every address; with this, nothing the cluster opens is
 * reachable from the network (docs/streams.md, "A private cluster"). Any other bind() is unchanged. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

__attribute__((visibility("default"))) int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    static bind_fn real;
    if (!real)
        real = (bind_fn)dlsym(RTLD_NEXT, "bind");
    if (addr && addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        struct sockaddr_in in4;
        memcpy(&in4, addr, sizeof in4);
        if (in4.sin_addr.s_addr == htonl(INADDR_ANY)) {
            in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            return real(fd, (const struct sockaddr *)&in4, sizeof in4);
        }
    } else if (addr && addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 in6;
        memcpy(&in6, addr, sizeof in6);
        if (!memcmp(&in6.sin6_addr, &in6addr_any, sizeof in6.sin6_addr)) {
            in6.sin6_addr = in6addr_loopback;
            return real(fd, (const struct sockaddr *)&in6, sizeof in6);
        }
    }
    return real(fd, addr, len);
}
