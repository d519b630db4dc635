#pragma once
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/x509_vfy.h>
#include <openssl/ecdsa.h>
#include <openssl/ec.h>
#include <openssl/bn.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/objects.h>

/* STACK_OF(X509) helpers are macros; typed wrappers for Swift. */
static inline STACK_OF(X509) *mw_sk_x509_new(void) { return sk_X509_new_null(); }
static inline int mw_sk_x509_push(STACK_OF(X509) *stack, X509 *certificate) { return sk_X509_push(stack, certificate); }
static inline void mw_sk_x509_free(STACK_OF(X509) *stack) { sk_X509_free(stack); }
