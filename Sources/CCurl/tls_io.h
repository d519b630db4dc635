#pragma once
/* A TLS connection's own socket I/O once its handshake is done: one send() per connection per driver turn, and one
   recv() per record read. The handshake itself is libcurl's (its BIO reads and writes it).

   libcurl 7.88 hands each HTTP/2 frame to its own SSL_write, and OpenSSL each record to its own send(): an FCM send
   is a HEADERS record and a DATA record, two system calls, and a turn that starts forty sends makes eighty. OpenSSL
   reads each record with two recv() calls (its 5-byte header, then its body): an answer from nginx is two records,
   four calls. Once a connection's handshake is done (`mw_tls_info`), its SSL is given two BIOs of this file:
   - Writes (`mw_buffered_writes`): every record is appended to the connection's buffer, and the driver sends each
     buffer with one send() at the end of its turn (`mw_tls_flush`), before it sleeps. A buffer that cannot take a
     record (64 KB waiting and the socket's send buffer full) refuses it as "try again", as the socket would: libcurl
     waits for the socket to be writable and writes again. Once a send fails (the peer is gone), later writes of the
     connection are dropped, as a kernel socket takes writes until it has seen the peer's reset; libcurl finds the
     connection dead on its read side. What is still buffered when libcurl
     frees a connection is dropped with it: a request in it never reached the server.
   - Reads (`mw_record_reads`): described at `mw_record_bio_read`.

   The socket is used directly, not through libcurl's BIO: that BIO needs the transfer libcurl is working for, and
   between libcurl's calls (where the driver flushes) there is none. The socket is found once per connection, when
   libcurl makes its TLS context (`mw_tls_find_socket`): among the sockets libcurl created (`mw_socket_created`), the
   one whose local and remote addresses are the ones libcurl reports for the connection. A connection whose socket is
   not found, or whose TLS runs inside another TLS (an https:// proxy: the client does not enable this then), keeps
   libcurl's BIO for both. Everything here runs on the driver thread (and in the client's teardown, after that thread
   is joined); the counts are read from any thread. */
#include <errno.h>
#include <pthread.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define MW_TLS_SOCKETS 64    /* sockets remembered, newest first: a connection's is found just after it was made */
#define MW_TLS_BUFFERED 64   /* connections with these BIOs at once; more keep libcurl's */
#define MW_TLS_BUFFER_BYTES (64 * 1024)

typedef struct mw_buffered_writes {
    int fd;
    int failed;             /* errno of a send that failed; 0 while the connection is usable */
    size_t length;
    unsigned char *bytes;   /* MW_TLS_BUFFER_BYTES, allocated at the first write */
    struct mw_tls_io *owner;
} mw_buffered_writes;

/* Buffers of connections that are gone, kept for the next ones: a connection opened every 100 requests (nginx's
   GOAWAY) then allocates nothing here, and the heap does not grow with the churn. */
#define MW_TLS_SPARES 8
typedef struct { unsigned char *buffers[MW_TLS_SPARES]; int count; } mw_tls_spares;

typedef struct mw_tls_io {
    int enabled;
    mw_tls_spares spare_writes, spare_looks, spare_records;
    unsigned long flushes;  /* send() calls of buffered records */
    unsigned long records;  /* records buffered */
    unsigned long receives; /* recv() calls that took records */
    unsigned long peeks;    /* recv(MSG_PEEK) calls that looked for them */
    unsigned long connections; /* connections given these BIOs */
    int sockets[MW_TLS_SOCKETS];
    unsigned next_socket;
    mw_buffered_writes *buffered[MW_TLS_BUFFERED];
    int buffered_count;
} mw_tls_io_state;

/* A buffer of `size` bytes: a spare one when there is one (all of a kind have its size), else a new one. */
static inline unsigned char *mw_tls_buffer(mw_tls_spares *spares, size_t size) {
    if (spares && spares->count > 0) return spares->buffers[--spares->count];
    return (unsigned char *)malloc(size);
}
static inline void mw_tls_spare(mw_tls_spares *spares, unsigned char *buffer) {
    if (!buffer) return;
    if (spares && spares->count < MW_TLS_SPARES) { spares->buffers[spares->count++] = buffer; return; }
    free(buffer);
}
/* The client's teardown, once every connection is freed. */
static inline void mw_tls_io_release(mw_tls_io_state *io) {
    mw_tls_spares *kinds[] = { &io->spare_writes, &io->spare_looks, &io->spare_records };
    for (int k = 0; k < 3; k++) {
        while (kinds[k]->count > 0) free(kinds[k]->buffers[--kinds[k]->count]);
    }
}

static inline void mw_tls_io_forget(mw_buffered_writes *writes) {
    mw_tls_io_state *owner = writes->owner;
    if (!owner) return;
    for (int i = 0; i < owner->buffered_count; i++) {
        if (owner->buffered[i] == writes) {
            owner->buffered[i] = owner->buffered[--owner->buffered_count];
            break;
        }
    }
    writes->owner = NULL;
}

/* Sends what is buffered. Returns 1 when the buffer is empty, 0 when the socket takes no more now, -1 when it failed. */
static inline int mw_buffered_send(mw_buffered_writes *writes) {
    if (writes->failed) return -1;
    size_t sent = 0;
    while (sent < writes->length) {
        ssize_t n = send(writes->fd, writes->bytes + sent, writes->length - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (writes->owner) __atomic_fetch_add(&writes->owner->flushes, 1, __ATOMIC_RELAXED);
        if (n > 0) { sent += (size_t)n; continue; }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        writes->failed = n < 0 ? errno : EPIPE;
        writes->length = 0;
        return -1;
    }
    if (sent > 0 && sent < writes->length) memmove(writes->bytes, writes->bytes + sent, writes->length - sent);
    writes->length -= sent;
    return writes->length == 0 ? 1 : 0;
}

static int mw_buffered_bio_write(BIO *bio, const char *data, int length) {
    mw_buffered_writes *writes = (mw_buffered_writes *)BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    if (!writes || length < 0) return -1;
    /* The peer is gone: what is written now is dropped, as a socket takes writes until it has seen the peer's reset.
       libcurl learns of the death from the read side, where a transfer that got nothing back is sent again (failing
       the write instead failed the whole HTTP/2 session at once, answered streams and refused ones alike). */
    if (writes->failed) return length;
    if (!writes->bytes && !(writes->bytes = mw_tls_buffer(writes->owner ? &writes->owner->spare_writes : NULL, MW_TLS_BUFFER_BYTES))) {
        errno = ENOMEM;
        return -1;
    }
    if (writes->length + (size_t)length > MW_TLS_BUFFER_BYTES) {
        if (mw_buffered_send(writes) < 0) return length;
        if (writes->length + (size_t)length > MW_TLS_BUFFER_BYTES) {
            BIO_set_retry_write(bio);
            return -1;
        }
    }
    memcpy(writes->bytes + writes->length, data, (size_t)length);
    writes->length += (size_t)length;
    if (writes->owner) __atomic_fetch_add(&writes->owner->records, 1, __ATOMIC_RELAXED);
    return length;
}

static long mw_buffered_bio_ctrl(BIO *bio, int command, long number, void *pointer) {
    (void)number; (void)pointer;
    mw_buffered_writes *writes = (mw_buffered_writes *)BIO_get_data(bio);
    switch (command) {
    case BIO_CTRL_FLUSH: return 1;  /* the driver sends at the end of its turn */
    case BIO_CTRL_WPENDING: return writes ? (long)writes->length : 0;
    case BIO_CTRL_PENDING: return 0;
    default: return 0;
    }
}

static int mw_buffered_bio_destroy(BIO *bio) {
    mw_buffered_writes *writes = (mw_buffered_writes *)BIO_get_data(bio);
    if (!writes) return 1;
    mw_tls_spare(writes->owner ? &writes->owner->spare_writes : NULL, writes->bytes);
    mw_tls_io_forget(writes);
    free(writes);
    BIO_set_data(bio, NULL);
    return 1;
}

/* The methods, made once (the first connection of any client; clients' driver threads may race to it). Function-local
   statics: Swift's importer emits a header's static functions, not its static variables. */
typedef struct { BIO_METHOD *writes, *reads; int write_type; } mw_tls_bio_methods_made;
static mw_tls_bio_methods_made *mw_tls_bio_methods_storage(void) {
    static mw_tls_bio_methods_made storage;
    return &storage;
}
static void mw_tls_make_bio_methods(void);
static const mw_tls_bio_methods_made *mw_tls_bio_methods(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, mw_tls_make_bio_methods);
    return mw_tls_bio_methods_storage();
}
static BIO_METHOD *mw_buffered_bio_method(int *type_out) {
    const mw_tls_bio_methods_made *made = mw_tls_bio_methods();
    *type_out = made->write_type;
    return made->writes;
}

/* The read side: one recv() per record instead of OpenSSL's two (the 5-byte header, then the body).

   OpenSSL asks its BIO for a record's header, then for its body. Reading more than it asks for would leave records
   in memory that neither OpenSSL (SSL_pending) nor the socket (poll) shows to libcurl 7.88, which reads only when one
   of them does: an answer would wait there until the next bytes arrive. So what is taken from the socket is exactly
   one record, and only bytes the socket already holds: a look (MSG_PEEK) shows what has arrived, and each record it
   shows complete is then taken with one recv() as OpenSSL asks for its header; the body is handed from memory. One
   look serves every record that had arrived by then. */
#define MW_TLS_PEEK_BYTES (16 * 1024)
#define MW_TLS_RECORD_BYTES (5 + 16384 + 2048)

typedef struct mw_record_reads {
    int fd;
    int eof;
    unsigned char *seen;     /* MW_TLS_PEEK_BYTES: what the last look showed, from `seen_offset` on still in the socket */
    size_t seen_offset, seen_length;
    unsigned char *taken;    /* MW_TLS_RECORD_BYTES: taken from the socket, not yet handed to OpenSSL */
    size_t taken_offset, taken_length;
    /* Where the socket's next byte is: in a record's header (`header_have` of its 5 bytes taken) or in its body
       (`body_left` bytes of it still in the socket). */
    unsigned char header[5];
    size_t header_have, body_left;
    struct mw_tls_io *owner;
} mw_record_reads;

static int mw_record_bio_read(BIO *bio, char *out, int wanted) {
    mw_record_reads *reads = (mw_record_reads *)BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    if (!reads || wanted <= 0) return 0;
    if (reads->taken_length > 0) {
        size_t n = reads->taken_length < (size_t)wanted ? reads->taken_length : (size_t)wanted;
        memcpy(out, reads->taken + reads->taken_offset, n);
        reads->taken_offset += n;
        reads->taken_length -= n;
        return (int)n;
    }
    if (!reads->seen && !(reads->seen = mw_tls_buffer(reads->owner ? &reads->owner->spare_looks : NULL, MW_TLS_PEEK_BYTES))) {
        errno = ENOMEM;
        return -1;
    }
    if (!reads->taken && !(reads->taken = mw_tls_buffer(reads->owner ? &reads->owner->spare_records : NULL, MW_TLS_RECORD_BYTES))) {
        errno = ENOMEM;
        return -1;
    }
    if (reads->seen_length < 5) {
        /* Where the next record ends is not known: look at what has arrived. */
        ssize_t n;
        do {
            n = recv(reads->fd, reads->seen, MW_TLS_PEEK_BYTES, MSG_PEEK | MSG_DONTWAIT);
            if (reads->owner) __atomic_fetch_add(&reads->owner->peeks, 1, __ATOMIC_RELAXED);
        } while (n < 0 && errno == EINTR);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_read(bio);
            return -1;
        }
        if (n == 0) { reads->eof = 1; return 0; }
        reads->seen_offset = 0;
        reads->seen_length = (size_t)n;
    }
    /* What to take: the rest of the record the socket's next byte belongs to, as far as it has arrived. */
    const unsigned char *next = reads->seen + reads->seen_offset;
    size_t take;
    if (reads->body_left > 0) {
        take = reads->seen_length < reads->body_left ? reads->seen_length : reads->body_left;
    } else {
        size_t header_needed = 5 - reads->header_have;
        if (reads->seen_length < header_needed) {
            take = reads->seen_length;
        } else {
            unsigned char header[5];
            memcpy(header, reads->header, reads->header_have);
            memcpy(header + reads->header_have, next, header_needed);
            size_t body = (size_t)header[3] << 8 | header[4];
            size_t body_seen = reads->seen_length - header_needed;
            take = header_needed + (body_seen < body ? body_seen : body);
        }
    }
    if (take > MW_TLS_RECORD_BYTES) take = MW_TLS_RECORD_BYTES;
    ssize_t n;
    do {
        n = recv(reads->fd, reads->taken, take, MSG_DONTWAIT);
        if (reads->owner) __atomic_fetch_add(&reads->owner->receives, 1, __ATOMIC_RELAXED);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) {
        /* The socket no longer holds what the look showed: forget the look, report as the socket does. */
        reads->seen_length = 0;
        if (n == 0) { reads->eof = 1; return 0; }
        if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_read(bio);
        return -1;
    }
    /* The record's boundary moves by what was taken. */
    for (size_t k = 0; k < (size_t)n;) {
        if (reads->body_left > 0) {
            size_t body = (size_t)n - k < reads->body_left ? (size_t)n - k : reads->body_left;
            reads->body_left -= body;
            k += body;
        } else {
            reads->header[reads->header_have++] = reads->taken[k++];
            if (reads->header_have == 5) {
                reads->body_left = (size_t)reads->header[3] << 8 | reads->header[4];
                reads->header_have = 0;
            }
        }
    }
    reads->seen_offset += (size_t)n;
    reads->seen_length -= (size_t)n;
    reads->taken_offset = 0;
    reads->taken_length = (size_t)n;
    return mw_record_bio_read(bio, out, wanted);
}

static long mw_record_bio_ctrl(BIO *bio, int command, long number, void *pointer) {
    (void)number; (void)pointer;
    mw_record_reads *reads = (mw_record_reads *)BIO_get_data(bio);
    switch (command) {
    case BIO_CTRL_EOF: return reads ? reads->eof : 1;
    case BIO_CTRL_PENDING: return reads ? (long)reads->taken_length : 0;
    case BIO_CTRL_FLUSH: return 1;
    default: return 0;
    }
}

static int mw_record_bio_destroy(BIO *bio) {
    mw_record_reads *reads = (mw_record_reads *)BIO_get_data(bio);
    if (!reads) return 1;
    mw_tls_spare(reads->owner ? &reads->owner->spare_looks : NULL, reads->seen);
    mw_tls_spare(reads->owner ? &reads->owner->spare_records : NULL, reads->taken);
    free(reads);
    BIO_set_data(bio, NULL);
    return 1;
}

static BIO_METHOD *mw_record_bio_method(void) { return mw_tls_bio_methods()->reads; }

static void mw_tls_make_bio_methods(void) {
    int write_type = BIO_get_new_index() | BIO_TYPE_SOURCE_SINK;
    BIO_METHOD *writes = BIO_meth_new(write_type, "medication-worker buffered writes");
    BIO_METHOD *reads = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "medication-worker record reads");
    if (!writes || !reads) { BIO_meth_free(writes); BIO_meth_free(reads); return; }
    BIO_meth_set_write(writes, mw_buffered_bio_write);
    BIO_meth_set_ctrl(writes, mw_buffered_bio_ctrl);
    BIO_meth_set_destroy(writes, mw_buffered_bio_destroy);
    BIO_meth_set_read(reads, mw_record_bio_read);
    BIO_meth_set_ctrl(reads, mw_record_bio_ctrl);
    BIO_meth_set_destroy(reads, mw_record_bio_destroy);
    mw_tls_bio_methods_made *made = mw_tls_bio_methods_storage();
    made->write_type = write_type;
    made->writes = writes;
    made->reads = reads;
}

/* CURLOPT_SOCKOPTFUNCTION's part: a TCP socket libcurl made for a connection. */
static inline void mw_tls_io_note_socket(mw_tls_io_state *io, int fd) {
    io->sockets[io->next_socket++ % MW_TLS_SOCKETS] = fd + 1;  /* 0: empty */
}

static inline int mw_same_port_and_address(const struct sockaddr_storage *address, const char *ip, long port) {
    char text[INET6_ADDRSTRLEN];
    if (address->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)address;
        return ntohs(v4->sin_port) == port && inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text) && strcmp(text, ip) == 0;
    }
    if (address->ss_family == AF_INET6) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)address;
        return ntohs(v6->sin6_port) == port && inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text) && strcmp(text, ip) == 0;
    }
    return 0;
}

/* The socket of the connection `handle` is making (libcurl reports its addresses once the TCP connection is up, before
   the TLS context is made). Returns -1 when none of the sockets remembered is it. */
static inline int mw_tls_find_socket(mw_tls_io_state *io, CURL *handle) {
    char *local_ip = NULL, *remote_ip = NULL;
    long local_port = 0, remote_port = 0;
    if (curl_easy_getinfo(handle, CURLINFO_LOCAL_IP, &local_ip) != CURLE_OK || !local_ip || !*local_ip) return -1;
    if (curl_easy_getinfo(handle, CURLINFO_PRIMARY_IP, &remote_ip) != CURLE_OK || !remote_ip || !*remote_ip) return -1;
    if (curl_easy_getinfo(handle, CURLINFO_LOCAL_PORT, &local_port) != CURLE_OK || local_port <= 0) return -1;
    if (curl_easy_getinfo(handle, CURLINFO_PRIMARY_PORT, &remote_port) != CURLE_OK || remote_port <= 0) return -1;
    for (unsigned k = 1; k <= MW_TLS_SOCKETS; k++) {
        int fd = io->sockets[(io->next_socket - k) % MW_TLS_SOCKETS] - 1;
        if (fd < 0) continue;
        struct sockaddr_storage local, remote;
        socklen_t local_size = sizeof local, remote_size = sizeof remote;
        if (getsockname(fd, (struct sockaddr *)&local, &local_size) != 0) continue;
        if (getpeername(fd, (struct sockaddr *)&remote, &remote_size) != 0) continue;
        if (mw_same_port_and_address(&local, local_ip, local_port) && mw_same_port_and_address(&remote, remote_ip, remote_port))
            return fd;
    }
    return -1;
}

/* A BIO that reads records of socket `fd` (counted in `io`, which may be NULL). NULL when out of memory. */
static inline BIO *mw_tls_new_reader(mw_tls_io_state *io, int fd) {
    BIO_METHOD *method = mw_record_bio_method();
    mw_record_reads *reads = method ? calloc(1, sizeof *reads) : NULL;
    BIO *bio = reads ? BIO_new(method) : NULL;
    if (!bio) { free(reads); return NULL; }
    reads->fd = fd;
    reads->owner = io;
    BIO_set_data(bio, reads);
    BIO_set_init(bio, 1);
    return bio;
}

/* A BIO that buffers the records written for socket `fd` until `mw_tls_flush` of `io` (or, with `io` NULL, until
   `mw_tls_flush_one`). NULL when out of memory or when `io` has no room. */
static inline BIO *mw_tls_new_writer(mw_tls_io_state *io, int fd) {
    int type = 0;
    BIO_METHOD *method = mw_buffered_bio_method(&type);
    if (!method || (io && io->buffered_count == MW_TLS_BUFFERED)) return NULL;
    mw_buffered_writes *buffered = calloc(1, sizeof *buffered);
    BIO *bio = buffered ? BIO_new(method) : NULL;
    if (!bio) { free(buffered); return NULL; }
    buffered->fd = fd;
    buffered->owner = io;
    BIO_set_data(bio, buffered);
    BIO_set_init(bio, 1);
    if (io) io->buffered[io->buffered_count++] = buffered;
    return bio;
}

/* Sends what `writer` (a BIO of `mw_tls_new_writer`) holds: 1 when all of it left, 0 when the socket takes no more now,
   -1 when the send failed. */
static inline int mw_tls_flush_one(BIO *writer) {
    mw_buffered_writes *buffered = (mw_buffered_writes *)BIO_get_data(writer);
    return buffered ? mw_buffered_send(buffered) : -1;
}

/* After the handshake: the SSL's records are written and read on the connection's socket `fd` by this file's BIOs. */
static inline void mw_tls_own_io(mw_tls_io_state *io, SSL *ssl, int fd) {
    if (!io->enabled || fd < 0) return;
    int type = 0;
    if (!mw_buffered_bio_method(&type)) return;
    BIO *current = SSL_get_wbio(ssl);
    if (!current || BIO_method_type(current) == type) return;
    BIO *reader = mw_tls_new_reader(io, fd);
    BIO *writer = reader ? mw_tls_new_writer(io, fd) : NULL;
    if (!writer) { if (reader) BIO_free(reader); return; }
    __atomic_fetch_add(&io->connections, 1, __ATOMIC_RELAXED);
    /* Each call drops the SSL's reference to libcurl's BIO (one for reading, one for writing): libcurl keeps none. */
    SSL_set0_wbio(ssl, writer);
    SSL_set0_rbio(ssl, reader);
}

/* The end of a driver turn: every connection's buffer is sent. Writes the sockets that could not take all of theirs
   to `waiting` (up to `capacity`; they are polled for writing) and returns how many. */
static inline int mw_tls_flush(mw_tls_io_state *io, int *waiting, int capacity) {
    int count = 0;
    for (int i = 0; i < io->buffered_count; i++) {
        mw_buffered_writes *buffered = io->buffered[i];
        if (buffered->length == 0) continue;
        if (mw_buffered_send(buffered) == 0 && count < capacity) waiting[count++] = buffered->fd;
    }
    return count;
}
