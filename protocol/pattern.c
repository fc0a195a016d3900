/* The pattern hash (pattern.h), through OpenSSL's SHA-256 (a dependency already: TLS, tokens). */
#include "protocol/pattern.h"
#include "common/error.h"

#include <openssl/evp.h>
#include <string.h>

/* Bytes of n int32 values in little-endian order (every host krylovd builds for is one). */
static int kd_pattern_update(EVP_MD_CTX *ctx, const int32_t *v, size_t n)
{
    return n == 0 || EVP_DigestUpdate(ctx, v, n * sizeof(int32_t)) == 1;
}

int kd_pattern_hash(const kd_csr_t *csr, uint8_t out[16])
{
    _Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the hash is over little-endian bytes");
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx == NULL)
        return KD_ENOMEM;
    unsigned char header[16 + 24] = "krylovd-pattern1";
    const int64_t fields[3] = {csr->rows, csr->cols, csr->nnz};
    memcpy(header + 16, fields, sizeof(fields));
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    int ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
             EVP_DigestUpdate(ctx, header, sizeof(header)) == 1 &&
             kd_pattern_update(ctx, csr->indptr, (size_t)csr->rows + 1) &&
             kd_pattern_update(ctx, csr->indices, (size_t)csr->nnz) &&
             EVP_DigestFinal_ex(ctx, digest, &len) == 1 && len >= 16;
    EVP_MD_CTX_free(ctx);
    if (!ok)
        return KD_EINTERNAL;
    memcpy(out, digest, 16);
    return KD_OK;
}
