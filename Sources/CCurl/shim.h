#pragma once
#include <curl/curl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

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
/* A socket the client corked: its descriptor, and its inode (which no other open socket shares). */
typedef struct {
    int fd;
    unsigned long inode;
} mw_corked_socket;

typedef struct {
    mw_new_session_callback curl_new_session;
    unsigned long full_handshakes;
    unsigned long resumed_handshakes;
    /* Sockets: TCP_USER_TIMEOUT in ms (0: the system's), TCP_CORK on each new connection (1) or not (0). */
    unsigned int user_timeout_ms;
    int cork;
    /* The corked sockets: added as libcurl creates a connection's socket, removed as it closes one
       (CURLOPT_CLOSESOCKETFUNCTION), each with its inode. Written by libcurl's callbacks on the driver thread (and at
       the client's end, after it is joined); freed with `mw_tls_state_release`. */
    mw_corked_socket *corked;
    int corked_count;
    int corked_capacity;
} mw_tls_state;

/* Frees what `state` holds (not `state` itself). */
static inline void mw_tls_state_release(mw_tls_state *state) {
    free(state->corked);
    state->corked = NULL;
    state->corked_count = state->corked_capacity = 0;
}

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

/* CURLOPT_SOCKOPTFUNCTION: a new TCP socket, before it connects. Data left unacknowledged `user_timeout_ms` drops the
   connection (TCP_USER_TIMEOUT); a connection's socket is corked (TCP_CORK) and kept in `corked` until libcurl closes it
   (`mw_socket_closed`), so that `mw_release_corked` releases it at the end of each driver turn (`TransferSockets`).
   - The set is the client's own: libcurl's `curl_multi_fdset` sees no descriptor past FD_SETSIZE (1,024), and Debian
     13's libcurl 8.14 aborts the process there (`Curl_cshutdn_setfds` sets a connection in shutdown without the range
     check; curl PR 19439).
   - Each entry carries its socket's inode, checked before each release: Debian 12's libcurl 7.88 closes a socket that
     never finished connecting (its connect timed out, a happy-eyeballs loser, a transfer removed while it connects)
     without the close callback (fixed in curl 8.2.0, issue 11439), and the kernel may give its number to someone else,
     a PostgreSQL connection say. Such an entry is dropped at the next release, and that socket is never touched.
   A socket that cannot be kept in the set is not corked. */
static unsigned long mw_socket_inode(int fd) {
    struct stat status;
    return fstat(fd, &status) == 0 ? (unsigned long)status.st_ino : 0;
}
static int mw_track_corked(mw_tls_state *state, int fd) {
    unsigned long inode = mw_socket_inode(fd);
    if (!inode) return 0;
    for (int i = 0; i < state->corked_count; i++) {
        if (state->corked[i].fd != fd) continue;
        state->corked[i].inode = inode;  /* a number whose earlier socket was closed unseen */
        return 1;
    }
    if (state->corked_count == state->corked_capacity) {
        int capacity = state->corked_capacity ? state->corked_capacity * 2 : 16;
        mw_corked_socket *grown = (mw_corked_socket *)realloc(state->corked, sizeof(mw_corked_socket) * (size_t)capacity);
        if (!grown) return 0;
        state->corked = grown;
        state->corked_capacity = capacity;
    }
    state->corked[state->corked_count++] = (mw_corked_socket){ fd, inode };
    return 1;
}
static int mw_socket_created(void *clientp, curl_socket_t fd, curlsocktype purpose) {
    mw_tls_state *state = (mw_tls_state *)clientp;
    if (!state) return CURL_SOCKOPT_OK;
    if (state->user_timeout_ms > 0) {
        unsigned int timeout = state->user_timeout_ms;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout, sizeof timeout);
    }
    if (purpose != CURLSOCKTYPE_IPCXN) return CURL_SOCKOPT_OK;
    if (state->cork && mw_track_corked(state, fd)) {
        int on = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on);
    }
    return CURL_SOCKOPT_OK;
}
/* CURLOPT_CLOSESOCKETFUNCTION: libcurl closes a socket; it leaves `corked` before its descriptor is free again. */
static int mw_socket_closed(void *clientp, curl_socket_t fd) {
    mw_tls_state *state = (mw_tls_state *)clientp;
    if (state) {
        for (int i = 0; i < state->corked_count; i++) {
            if (state->corked[i].fd != fd) continue;
            state->corked[i] = state->corked[--state->corked_count];
            break;
        }
    }
    return close(fd);
}
static inline CURLcode mw_easy_setopt_sockopt(CURL *handle, mw_tls_state *state) {
    CURLcode code = curl_easy_setopt(handle, CURLOPT_SOCKOPTFUNCTION, mw_socket_created);
    if (code == CURLE_OK) code = curl_easy_setopt(handle, CURLOPT_SOCKOPTDATA, (void *)state);
    if (code == CURLE_OK) code = curl_easy_setopt(handle, CURLOPT_CLOSESOCKETFUNCTION, mw_socket_closed);
    if (code == CURLE_OK) code = curl_easy_setopt(handle, CURLOPT_CLOSESOCKETDATA, (void *)state);
    return code;
}
/* Sends what was written to each corked socket since the last release, and holds later writes again; an entry whose
   descriptor is closed, or is now another socket, is dropped untouched. */
static inline void mw_release_corked(mw_tls_state *state) {
    int off = 0, on = 1;
    for (int i = 0; i < state->corked_count; ) {
        int fd = state->corked[i].fd;
        if (mw_socket_inode(fd) != state->corked[i].inode) {
            state->corked[i] = state->corked[--state->corked_count];
            continue;
        }
        (void)setsockopt(fd, IPPROTO_TCP, TCP_CORK, &off, sizeof off);
        (void)setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on);
        i++;
    }
}
/* How many sockets are corked now. */
static inline int mw_corked_count(const mw_tls_state *state) { return state->corked_count; }

/* glibc's memfd_create(2): <sys/mman.h> declares it only under _GNU_SOURCE, which Swift's Glibc module is built
   without. MFD_CLOEXEC is 1. */
extern int memfd_create(const char *name, unsigned int flags);
