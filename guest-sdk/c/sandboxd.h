/*
 * sandboxd.h: the sandboxd handler ABI v1 for C (and C-ABI) guests.
 *
 * Declares the host functions of the import module "sandboxd_v1" and the
 * error numbers they return. The normative text is abi/README.md in the
 * sandboxd repository; this header follows it exactly. ABI v1 may gain
 * functions; it never changes or removes one.
 *
 * A reactor exports memory and `int32_t handle(void)` (0 = success) and may
 * export _initialize; a command is a plain WASI program (_start) reading its
 * input on stdin and writing its output to stdout. For example, with clang and
 * wasi-libc:
 *
 *   __attribute__((export_name("handle"))) int32_t handle(void) { ... }
 *
 *   clang --target=wasm32-wasip1 -mexec-model=reactor -o handler.wasm handler.c
 *
 * Size/copy convention: every *_read and *_get returns the full size of the
 * value and copies min(len, size) bytes to ptr, so call it with len = 0 first
 * to learn the size. A negative result is an error number (SANDBOXD_E*);
 * sandboxd_last_error_read then returns a message about it.
 */
#ifndef SANDBOXD_H
#define SANDBOXD_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SANDBOXD_IMPORT(name) \
	__attribute__((import_module("sandboxd_v1"), import_name(name)))

/* Error numbers (negative results). */
#define SANDBOXD_EDENIED              (-1)  /* refused by policy (network, secret under strict) */
#define SANDBOXD_ENOTFOUND            (-2)  /* name not declared, or no value provided */
#define SANDBOXD_EINVAL               (-3)  /* malformed argument: bad JSON, method, URL, level */
#define SANDBOXD_EOUTOFBOUNDS         (-4)  /* a ptr,len range outside guest memory */
#define SANDBOXD_ETOOLARGE            (-5)  /* a value over its cap (output, error, log line) */
#define SANDBOXD_EBADHANDLE           (-6)  /* unknown or already closed response handle */
#define SANDBOXD_ENOINVOCATION        (-7)  /* called outside an invocation (e.g. from _initialize) */
#define SANDBOXD_EUNAVAILABLE         (-8)  /* network failure: DNS, connect, TLS, reset */
#define SANDBOXD_ETIMEOUT             (-9)  /* per-request timeout or the invocation's deadline */
#define SANDBOXD_EREQUESTBUDGET       (-10) /* too many requests in this invocation */
#define SANDBOXD_EBODYBUDGET          (-11) /* request/response body bytes budget exhausted */
#define SANDBOXD_EHEADERBUDGET        (-12) /* header bytes budget exhausted */
#define SANDBOXD_ECONNBUDGET          (-13) /* too many concurrent connections */
#define SANDBOXD_EREDIRECT            (-14) /* more than 5 redirects, or https -> http */
#define SANDBOXD_EMEMORYBUDGET        (-15) /* host-side buffers would exceed memMB */
#define SANDBOXD_EINTERNAL            (-16) /* a host failure not caused by the guest */

/* Log levels for sandboxd_log. */
#define SANDBOXD_LOG_DEBUG 0
#define SANDBOXD_LOG_INFO  1
#define SANDBOXD_LOG_WARN  2
#define SANDBOXD_LOG_ERROR 3

/* The invocation input: JSON, validated, with schema defaults filled. */
SANDBOXD_IMPORT("input_read")
int32_t sandboxd_input_read(uint8_t *ptr, uint32_t len);

/* The call context JSON: tenantId, runId, requestId?, projectId?, orgId?,
 * idempotencyKey?, settings?, env (declared needsSpec.env values only). */
SANDBOXD_IMPORT("context_read")
int32_t sandboxd_context_read(uint8_t *ptr, uint32_t len);

/* Set the output (one JSON value; the last call wins). 0 or an error. */
SANDBOXD_IMPORT("output_set")
int32_t sandboxd_output_set(const uint8_t *ptr, uint32_t len);

/* Declare a failure: {"code","message","details"?} JSON or plain text.
 * Takes effect when handle returns non-zero. 0 or an error. */
SANDBOXD_IMPORT("error_set")
int32_t sandboxd_error_set(const uint8_t *ptr, uint32_t len);

/* Write a log line at a SANDBOXD_LOG_* level (bounded per invocation). */
SANDBOXD_IMPORT("log")
void sandboxd_log(int32_t level, const uint8_t *ptr, uint32_t len);

/* Send an HTTP request. req is JSON {"method","url","headers":{name:value}}.
 * Returns a response handle >= 0 or an error number. */
SANDBOXD_IMPORT("http_request")
int64_t sandboxd_http_request(const uint8_t *req_ptr, uint32_t req_len,
                              const uint8_t *body_ptr, uint32_t body_len);

/* The response status code, or an error. */
SANDBOXD_IMPORT("http_status")
int32_t sandboxd_http_status(int32_t h);

/* The response headers as a JSON object (size/copy convention). */
SANDBOXD_IMPORT("http_headers_read")
int32_t sandboxd_http_headers_read(int32_t h, uint8_t *ptr, uint32_t len);

/* Stream the response body: bytes copied this call, 0 at the end, or an error. */
SANDBOXD_IMPORT("http_body_read")
int32_t sandboxd_http_body_read(int32_t h, uint8_t *ptr, uint32_t len);

/* Release a response. 0 or an error. */
SANDBOXD_IMPORT("http_close")
int32_t sandboxd_http_close(int32_t h);

/* A secret declared in needsSpec.secrets (size/copy convention). */
SANDBOXD_IMPORT("secret_get")
int32_t sandboxd_secret_get(const uint8_t *name_ptr, uint32_t name_len,
                            uint8_t *ptr, uint32_t len);

/* A value declared in needsSpec.config, as JSON (size/copy convention). */
SANDBOXD_IMPORT("config_get")
int32_t sandboxd_config_get(const uint8_t *name_ptr, uint32_t name_len,
                            uint8_t *ptr, uint32_t len);

/* The message behind the last negative result (size/copy convention). */
SANDBOXD_IMPORT("last_error_read")
int32_t sandboxd_last_error_read(uint8_t *ptr, uint32_t len);

#undef SANDBOXD_IMPORT

#ifdef __cplusplus
}
#endif

#endif /* SANDBOXD_H */
