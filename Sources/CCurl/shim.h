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
static inline CURLMcode mw_multi_setopt_long(CURLM *handle, CURLMoption option, long value) {
    return curl_multi_setopt(handle, option, value);
}

/* CURLOPT_SSL_CTX_FUNCTION: clear SSL_MODE_RELEASE_BUFFERS, which libcurl 7.88 sets on every context it makes
   (8.8 dropped it). With it, OpenSSL frees a connection's read and write buffers whenever they empty and allocates
   them again for the next record: an allocation and a free per record on a connection that carries a record every
   few microseconds. The buffers (about 34 KB per connection) stay allocated instead. */
#include <openssl/ssl.h>
static CURLcode mw_keep_tls_buffers(CURL *handle, void *ssl_ctx, void *userdata) {
    (void)handle; (void)userdata;
    SSL_CTX_clear_mode((SSL_CTX *)ssl_ctx, SSL_MODE_RELEASE_BUFFERS);
    return CURLE_OK;
}
static inline CURLcode mw_easy_keep_tls_buffers(CURL *handle) {
    return curl_easy_setopt(handle, CURLOPT_SSL_CTX_FUNCTION, mw_keep_tls_buffers);
}

typedef int (*mw_curl_sockopt_callback)(void *clientp, curl_socket_t fd, curlsocktype purpose);
static inline CURLcode mw_easy_setopt_sockopt(CURL *handle, mw_curl_sockopt_callback callback, void *clientp) {
    CURLcode code = curl_easy_setopt(handle, CURLOPT_SOCKOPTFUNCTION, callback);
    if (code != CURLE_OK) return code;
    return curl_easy_setopt(handle, CURLOPT_SOCKOPTDATA, clientp);
}

/* The descriptors of curl_multi_fdset's sets that are set, up to `capacity` of them (fd_set's macros
   are not visible to Swift). Returns how many were written to `out`. */
#include <sys/select.h>
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
