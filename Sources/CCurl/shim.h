#pragma once
#include <curl/curl.h>

/* Typed wrappers for libcurl's variadic setopt/getinfo (Swift cannot call C variadics),
   in the style of swift-corelibs-foundation's CFURLSessionInterface. */

typedef size_t (*mw_curl_data_callback)(char *buffer, size_t size, size_t count, void *userdata);

static inline CURLcode mw_easy_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode mw_easy_setopt_ptr(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode mw_easy_setopt_cstr(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode mw_easy_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode mw_easy_setopt_callback(CURL *handle, CURLoption option, mw_curl_data_callback value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode mw_easy_setopt_blob(CURL *handle, CURLoption option, void *data, size_t length) {
    struct curl_blob blob = { data, length, CURL_BLOB_COPY };
    return curl_easy_setopt(handle, option, &blob);
}
static inline CURLcode mw_easy_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}
static inline CURLcode mw_easy_getinfo_ptr(CURL *handle, CURLINFO info, void **value) {
    return curl_easy_getinfo(handle, info, value);
}
static inline CURLcode mw_easy_getinfo_off(CURL *handle, CURLINFO info, curl_off_t *value) {
    return curl_easy_getinfo(handle, info, value);
}
static inline CURLSHcode mw_share_setopt_long(CURLSH *handle, CURLSHoption option, long value) {
    return curl_share_setopt(handle, option, value);
}
static inline CURLMcode mw_multi_setopt_long(CURLM *handle, CURLMoption option, long value) {
    return curl_multi_setopt(handle, option, value);
}

/* CURLOPT_SSL_CTX_FUNCTION, called for every new connection's SSL_CTX after libcurl has configured it.
   - Clears SSL_MODE_RELEASE_BUFFERS (a free and a malloc around every record): Debian 12's libcurl 7.88 sets it
     (docs/benchmark.md, libcurl's floor: 60.3 -> 56.3 mallocs per send); 8.14 does not.
   - Clears SSL_OP_NO_TICKET, so a TLS 1.2 session resumes without a server-side cache: 7.88 and 8.14 both set it
     (HTTP2Tests.connectionsAfterAGoaway_resumeTheTLSSession, TLSv1.2).
   - Gives libcurl's session cache a copy of each new (or resumed TLS 1.2) session that no connection uses, as OpenSSL
     spoils a session whose connection ends without a close_notify: Debian 12's libcurl 7.88 (the same test, TLS 1.2
     and 1.3; not needed on 8.14, which caches sessions serialized).
   Every connection's handshake is counted, full or resumed; a TLS 1.2 renegotiation is not a new one. */
#include <openssl/ssl.h>
typedef int (*mw_new_session_callback)(SSL *, SSL_SESSION *);

/* One HTTP client's TLS state, owned by the client (it outlives every connection): libcurl's new-session callback
   (one function for every context), the handshakes counted, full and resumed, and what new sockets are given. Each
   context points at it through its application data, which libcurl does not use. Written on the driver thread; the
   counts are read from any. */
#include <netinet/in.h>
#include <netinet/tcp.h>
typedef struct {
    mw_new_session_callback curl_new_session;
    unsigned long full_handshakes;
    unsigned long resumed_handshakes;
    /* Sockets: TCP_USER_TIMEOUT in ms (0: the system's), TCP_CORK on each new connection (1) or not (0). */
    unsigned int user_timeout_ms;
    int cork;
} mw_tls_state;

static int mw_offer_session_copy(SSL *ssl, SSL_SESSION *session) {
    mw_tls_state *state = (mw_tls_state *)SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    mw_new_session_callback store = state ? state->curl_new_session : NULL;
    SSL_SESSION *copy = store && SSL_SESSION_is_resumable(session) ? SSL_SESSION_dup(session) : NULL;
    if (copy && !store(ssl, copy)) SSL_SESSION_free(copy);
    return 0; /* the connection's own session is not kept */
}
static void mw_tls_info(const SSL *ssl, int where, int ret) {
    (void)ret;
    if (!(where & SSL_CB_HANDSHAKE_DONE) || SSL_num_renegotiations((SSL *)ssl) > 0) return;
    mw_tls_state *state = (mw_tls_state *)SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    if (!SSL_session_reused((SSL *)ssl)) {
        if (state) __atomic_fetch_add(&state->full_handshakes, 1, __ATOMIC_RELAXED);
        return;
    }
    if (state) __atomic_fetch_add(&state->resumed_handshakes, 1, __ATOMIC_RELAXED);
    SSL_SESSION *session = SSL_get_session(ssl);
    if (session) (void)mw_offer_session_copy((SSL *)ssl, session);
}
static CURLcode mw_tune_tls_context(CURL *handle, void *ssl_ctx, void *userdata) {
    (void)handle;
    SSL_CTX *context = (SSL_CTX *)ssl_ctx;
    mw_tls_state *state = (mw_tls_state *)userdata;
    SSL_CTX_clear_mode(context, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_clear_options(context, SSL_OP_NO_TICKET);
    if (!state) return CURLE_OK;
    mw_new_session_callback store = SSL_CTX_sess_get_new_cb(context);
    if (store && store != mw_offer_session_copy) {
        state->curl_new_session = store;
        SSL_CTX_sess_set_new_cb(context, mw_offer_session_copy);
    }
    SSL_CTX_set_app_data(context, state);
    SSL_CTX_set_info_callback(context, mw_tls_info);
    return CURLE_OK;
}
static inline CURLcode mw_easy_tune_tls(CURL *handle, mw_tls_state *state) {
    CURLcode code = curl_easy_setopt(handle, CURLOPT_SSL_CTX_FUNCTION, mw_tune_tls_context);
    if (code != CURLE_OK) return code;
    return curl_easy_setopt(handle, CURLOPT_SSL_CTX_DATA, (void *)state);
}
static inline unsigned long mw_tls_full_handshakes(mw_tls_state *state) {
    return __atomic_load_n(&state->full_handshakes, __ATOMIC_RELAXED);
}
static inline unsigned long mw_tls_resumed_handshakes(mw_tls_state *state) {
    return __atomic_load_n(&state->resumed_handshakes, __ATOMIC_RELAXED);
}

#include <sys/select.h>
/* CURLOPT_SOCKOPTFUNCTION: a new TCP socket, before it connects. Data left unacknowledged `user_timeout_ms` drops the
   connection (TCP_USER_TIMEOUT); a connection's socket is corked (TCP_CORK, released at the end of each driver turn:
   `TransferSockets`). */
static int mw_socket_created(void *clientp, curl_socket_t fd, curlsocktype purpose) {
    mw_tls_state *state = (mw_tls_state *)clientp;
    if (!state) return CURL_SOCKOPT_OK;
    if (state->user_timeout_ms > 0) {
        unsigned int timeout = state->user_timeout_ms;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout, sizeof timeout);
    }
    if (purpose != CURLSOCKTYPE_IPCXN) return CURL_SOCKOPT_OK;
    if (state->cork && fd < FD_SETSIZE) {
        int on = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on);
    }
    return CURL_SOCKOPT_OK;
}
static inline CURLcode mw_easy_setopt_sockopt(CURL *handle, mw_tls_state *state) {
    CURLcode code = curl_easy_setopt(handle, CURLOPT_SOCKOPTFUNCTION, mw_socket_created);
    if (code != CURLE_OK) return code;
    return curl_easy_setopt(handle, CURLOPT_SOCKOPTDATA, (void *)state);
}
/* The descriptors of curl_multi_fdset's sets that are set, up to `capacity` of them (fd_set's macros
   are not visible to Swift). Returns how many were written to `out`. */
static inline int mw_multi_sockets(CURLM *multi, int *out, int capacity) {
    fd_set readable, writable, failed;
    FD_ZERO(&readable); FD_ZERO(&writable); FD_ZERO(&failed);
    int highest = -1;
    if (curl_multi_fdset(multi, &readable, &writable, &failed, &highest) != CURLM_OK) return 0;
    int count = 0;
    for (int fd = 0; fd <= highest && count < capacity; fd++) {
        if (FD_ISSET(fd, &readable) || FD_ISSET(fd, &writable)) out[count++] = fd;
    }
    return count;
}
/* libcurl's version as 0xXXYYZZ (curl_version_info). */
static inline unsigned int mw_curl_version_num(void) { return curl_version_info(CURLVERSION_NOW)->version_num; }

/* The driver's event loop over libcurl's multi_socket API. libcurl names the sockets to watch and what for
   (CURLMOPT_SOCKETFUNCTION) and when to be called back (CURLMOPT_TIMERFUNCTION); one epoll set holds those sockets and
   an eventfd that wakes the driver from any thread. A wake-up runs only the transfers of the sockets that are ready.
   curl_multi_perform runs every transfer in progress on each turn, and each one polls its socket: 47 poll calls per push
   with 500 on the wire when FCM answers in 50 ms (docs/benchmark.md, "Round 6"). Used where libcurl is 8.14 or newer
   (`HTTPClient.Driver`); by the driver thread only, except `mw_event_loop_wake`. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
typedef struct {
    int epoll_fd;
    int wake_fd;
    /* When libcurl wants CURL_SOCKET_TIMEOUT (CLOCK_MONOTONIC, ns); -1: no timer. */
    int64_t deadline_ns;
    /* The sockets libcurl watches: the ones a driver turn's writes are released on (`TransferSockets`). */
    int *sockets;
    int socket_count;
    int socket_capacity;
} mw_event_loop;

static inline int64_t mw_monotonic_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}
static void mw_event_loop_forget(mw_event_loop *loop, int fd) {
    for (int i = 0; i < loop->socket_count; i++) {
        if (loop->sockets[i] == fd) { loop->sockets[i] = loop->sockets[--loop->socket_count]; return; }
    }
}
static int mw_event_loop_remember(mw_event_loop *loop, int fd) {
    if (loop->socket_count == loop->socket_capacity) {
        int capacity = loop->socket_capacity ? loop->socket_capacity * 2 : 16;
        int *grown = realloc(loop->sockets, (size_t)capacity * sizeof(int));
        if (!grown) return -1;
        loop->sockets = grown;
        loop->socket_capacity = capacity;
    }
    loop->sockets[loop->socket_count++] = fd;
    return 0;
}
/* CURLMOPT_SOCKETFUNCTION: watch `fd` for what libcurl asks, or stop watching it. */
static int mw_event_loop_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
    (void)easy; (void)socketp;
    mw_event_loop *loop = (mw_event_loop *)userp;
    if (what == CURL_POLL_REMOVE) {
        (void)epoll_ctl(loop->epoll_fd, EPOLL_CTL_DEL, fd, NULL);
        mw_event_loop_forget(loop, fd);
        return 0;
    }
    struct epoll_event event = { 0 };
    event.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0);
    event.data.fd = fd;
    if (epoll_ctl(loop->epoll_fd, EPOLL_CTL_MOD, fd, &event) == 0) return 0;
    if (errno != ENOENT || epoll_ctl(loop->epoll_fd, EPOLL_CTL_ADD, fd, &event) != 0) return -1;
    return mw_event_loop_remember(loop, fd);
}
/* CURLMOPT_TIMERFUNCTION: when libcurl wants to be called with CURL_SOCKET_TIMEOUT (-1: never). */
static int mw_event_loop_timer(CURLM *multi, long timeout_ms, void *userp) {
    (void)multi;
    mw_event_loop *loop = (mw_event_loop *)userp;
    loop->deadline_ns = timeout_ms < 0 ? -1 : mw_monotonic_ns() + (int64_t)timeout_ms * 1000000;
    return 0;
}
static inline void mw_event_loop_destroy(mw_event_loop *loop) {
    if (!loop) return;
    if (loop->epoll_fd >= 0) close(loop->epoll_fd);
    if (loop->wake_fd >= 0) close(loop->wake_fd);
    free(loop->sockets);
    free(loop);
}
/* A loop for `multi`, or NULL (errno says why). */
static inline mw_event_loop *mw_event_loop_create(CURLM *multi) {
    mw_event_loop *loop = calloc(1, sizeof *loop);
    if (!loop) return NULL;
    loop->deadline_ns = -1;
    loop->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    loop->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event wake = { 0 };
    wake.events = EPOLLIN;
    wake.data.fd = loop->wake_fd;
    if (loop->epoll_fd < 0 || loop->wake_fd < 0 || epoll_ctl(loop->epoll_fd, EPOLL_CTL_ADD, loop->wake_fd, &wake) != 0
        || curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, mw_event_loop_socket) != CURLM_OK
        || curl_multi_setopt(multi, CURLMOPT_SOCKETDATA, (void *)loop) != CURLM_OK
        || curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, mw_event_loop_timer) != CURLM_OK
        || curl_multi_setopt(multi, CURLMOPT_TIMERDATA, (void *)loop) != CURLM_OK) {
        int saved = errno;
        mw_event_loop_destroy(loop);
        errno = saved;
        return NULL;
    }
    return loop;
}
/* Wakes the driver from any thread (an eventfd write never blocks; a full counter is already a wake-up). */
static inline void mw_event_loop_wake(mw_event_loop *loop) {
    uint64_t one = 1;
    (void)!write(loop->wake_fd, &one, sizeof one);
}
/* One turn: waits up to `max_wait_ms` (less when libcurl's timer is due sooner) for a socket, a wake-up or the timer,
   and hands libcurl what happened. Returns the number of sockets that were ready, or -1 when epoll failed. */
static inline int mw_event_loop_run(mw_event_loop *loop, CURLM *multi, int max_wait_ms) {
    int wait = max_wait_ms, running = 0, ready = 0;
    if (loop->deadline_ns >= 0) {
        int64_t left = (loop->deadline_ns - mw_monotonic_ns() + 999999) / 1000000;
        if (left < wait) wait = left < 0 ? 0 : (int)left;
    }
    struct epoll_event events[64];
    int count = epoll_wait(loop->epoll_fd, events, 64, wait);
    if (count < 0 && errno != EINTR) return -1;
    for (int i = 0; i < count; i++) {
        int fd = events[i].data.fd;
        if (fd == loop->wake_fd) {
            uint64_t value;
            (void)!read(loop->wake_fd, &value, sizeof value);
            continue;
        }
        uint32_t what = events[i].events;
        /* A hang-up or an error is read as readable, as libcurl's own poll does: the read finds the GOAWAY or the
           error, where CURL_CSELECT_ERR would fail the transfers without reading what the server said. */
        int mask = ((what & (EPOLLIN | EPOLLERR | EPOLLHUP)) ? CURL_CSELECT_IN : 0) | ((what & EPOLLOUT) ? CURL_CSELECT_OUT : 0);
        (void)curl_multi_socket_action(multi, fd, mask, &running);
        ready++;
    }
    if (loop->deadline_ns >= 0 && mw_monotonic_ns() >= loop->deadline_ns) {
        loop->deadline_ns = -1;
        (void)curl_multi_socket_action(multi, CURL_SOCKET_TIMEOUT, 0, &running);
    }
    return ready;
}
/* The sockets libcurl watches, up to `capacity` of them written to `out`; returns how many it watches. */
static inline int mw_event_loop_sockets(const mw_event_loop *loop, int *out, int capacity) {
    int count = loop->socket_count < capacity ? loop->socket_count : capacity;
    for (int i = 0; i < count; i++) out[i] = loop->sockets[i];
    return loop->socket_count;
}
