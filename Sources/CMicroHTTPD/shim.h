#pragma once
#include <sys/types.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdarg.h>
#include <microhttpd.h>

/* Typed wrappers for libmicrohttpd's variadic calls (Swift cannot call C variadics). */

/* Starts a daemon bound to exactly `addr`; TLS (GnuTLS inside libmicrohttpd) when key and cert are given.
   `connection_limit` and `per_ip_limit` of 0 leave libmicrohttpd's defaults (FD_SETSIZE-ish and no per-IP limit):
   "MHD_OPTION_CONNECTION_LIMIT: maximum number of concurrent connections to accept";
   "MHD_OPTION_PER_IP_CONNECTION_LIMIT: limit on the number of (concurrent) connections made to the server from the
   same IP address" (microhttpd.h). Connections over either limit are closed as soon as they are accepted. */
static inline struct MHD_Daemon *mw_mhd_start(unsigned int flags, const struct sockaddr *addr,
                                              MHD_AccessHandlerCallback handler, void *handler_cls,
                                              MHD_RequestCompletedCallback completed, void *completed_cls,
                                              MHD_NotifyConnectionCallback notify, void *notify_cls,
                                              const char *tls_key, const char *tls_cert,
                                              unsigned int timeout_seconds, unsigned int connection_limit,
                                              unsigned int per_ip_limit) {
    struct MHD_OptionItem options[8];
    size_t count = 0;
    options[count++] = (struct MHD_OptionItem) { MHD_OPTION_CONNECTION_TIMEOUT, timeout_seconds, NULL };
    if (connection_limit > 0) options[count++] = (struct MHD_OptionItem) { MHD_OPTION_CONNECTION_LIMIT, connection_limit, NULL };
    if (per_ip_limit > 0) options[count++] = (struct MHD_OptionItem) { MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip_limit, NULL };
    options[count] = (struct MHD_OptionItem) { MHD_OPTION_END, 0, NULL };
    if (tls_key != NULL && tls_cert != NULL) {
        return MHD_start_daemon(flags | MHD_USE_TLS, 0, NULL, NULL, handler, handler_cls,
                                MHD_OPTION_SOCK_ADDR, addr,
                                MHD_OPTION_NOTIFY_COMPLETED, completed, completed_cls,
                                MHD_OPTION_NOTIFY_CONNECTION, notify, notify_cls,
                                MHD_OPTION_HTTPS_MEM_KEY, tls_key,
                                MHD_OPTION_HTTPS_MEM_CERT, tls_cert,
                                MHD_OPTION_ARRAY, options,
                                MHD_OPTION_END);
    }
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, handler_cls,
                            MHD_OPTION_SOCK_ADDR, addr,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, completed_cls,
                            MHD_OPTION_NOTIFY_CONNECTION, notify, notify_cls,
                            MHD_OPTION_ARRAY, options,
                            MHD_OPTION_END);
}

/* The port the daemon is bound to (after binding port 0). */
static inline uint16_t mw_mhd_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

static inline int mw_mhd_tls_supported(void) {
    return MHD_is_feature_supported(MHD_FEATURE_TLS) == MHD_YES;
}

/* Flags the Swift side needs as plain integers. */
static inline unsigned int mw_mhd_flags_threaded(int ipv6) {
    return MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | (ipv6 ? MHD_USE_IPv6 : 0);
}
/* One internal thread polling every connection with epoll: a connection costs a descriptor, not a thread.
   For handlers that never block (the health endpoint). */
static inline unsigned int mw_mhd_flags_epoll(int ipv6) {
    return MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | (ipv6 ? MHD_USE_IPv6 : 0);
}
static inline int mw_mhd_is_connection_started(enum MHD_ConnectionNotificationCode code) {
    return code == MHD_CONNECTION_NOTIFY_STARTED;
}
static inline enum MHD_Result mw_mhd_yes(void) { return MHD_YES; }
static inline enum MHD_Result mw_mhd_no(void) { return MHD_NO; }
static inline enum MHD_ValueKind mw_mhd_header_kind(void) { return MHD_HEADER_KIND; }
static inline enum MHD_ValueKind mw_mhd_query_kind(void) { return MHD_GET_ARGUMENT_KIND; }

/* Queues a copy of `body` with the given headers (parallel arrays) and status. */
static inline enum MHD_Result mw_mhd_respond(struct MHD_Connection *connection, unsigned int status,
                                             const void *body, size_t length,
                                             const char *const *names, const char *const *values, size_t count) {
    struct MHD_Response *response = MHD_create_response_from_buffer(length, (void *) body, MHD_RESPMEM_MUST_COPY);
    if (response == NULL) return MHD_NO;
    for (size_t i = 0; i < count; i++) MHD_add_response_header(response, names[i], values[i]);
    enum MHD_Result result = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return result;
}
