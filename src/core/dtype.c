#include "core/dtype.h"

#include <math.h>
#include <string.h>

#include "core/check.h"

size_t tt_dtype_size(tt_dtype dtype) {
    switch (dtype) {
    case TT_F32: return 4;
    case TT_BF16: return 2;
    case TT_F16: return 2;
    case TT_F64: return 8;
    case TT_I32: return 4;
    case TT_I64: return 8;
    case TT_U8: return 1;
    default: TT_CHECK(0, "unknown dtype %d", (int)dtype);
    }
}

static const char *const safetensors_names[TT_DTYPE_COUNT] = {"F32", "BF16", "F16", "F64", "I32", "I64", "U8"};
static const char *const torch_names[TT_DTYPE_COUNT] = {"float32", "bfloat16", "float16", "float64",
                                                        "int32",   "int64",    "uint8"};

const char *tt_dtype_safetensors_name(tt_dtype dtype) { return safetensors_names[dtype]; }
const char *tt_dtype_torch_name(tt_dtype dtype) { return torch_names[dtype]; }

int tt_dtype_from_safetensors_name(const char *name, tt_dtype *out) {
    for (int i = 0; i < TT_DTYPE_COUNT; i++)
        if (strcmp(name, safetensors_names[i]) == 0) {
            *out = (tt_dtype)i;
            return 0;
        }
    return -1;
}

int tt_dtype_from_torch_name(const char *name, tt_dtype *out) {
    for (int i = 0; i < TT_DTYPE_COUNT; i++)
        if (strcmp(name, torch_names[i]) == 0) {
            *out = (tt_dtype)i;
            return 0;
        }
    return -1;
}

float tt_bf16_to_f32(uint16_t v) {
    uint32_t bits = (uint32_t)v << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t tt_f32_to_bf16(float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40); /* quiet NaN */
    uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)((bits + rounding) >> 16);
}

float tt_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    uint32_t bits;
    if (exponent == 0) {
        if (mantissa == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                mantissa <<= 1;
            } while ((mantissa & 0x400u) == 0);
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mantissa & 0x3ffu) << 13);
        }
    } else if (exponent == 31) {
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else {
        bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t tt_f32_to_f16(float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t abs_bits = bits & 0x7fffffffu;
    if (abs_bits > 0x7f800000u) return sign | 0x7e00u;  /* NaN */
    if (abs_bits >= 0x477ff000u) return sign | 0x7c00u; /* overflow to inf */
    if (abs_bits < 0x33000001u) return sign;            /* underflow to zero */
    int32_t exponent = (int32_t)(abs_bits >> 23) - 127 + 15;
    uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
    int shift = exponent <= 0 ? 14 - exponent : 13; /* subnormals shift further */
    if (exponent <= 0) exponent = 0;
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1u))) half++;
    if (exponent == 0) return sign | (uint16_t)half; /* carry into the exponent is correct */
    return sign | (uint16_t)(((uint32_t)exponent << 10) + (half & 0x3ffu) + ((half >> 10) - 1) * 0x400u);
}

/* src and dst may sit at any address: tensor data in a safetensors file starts wherever its
 * header ends, odd offsets included, and a uint16_t or double read through a misaligned pointer
 * is undefined behaviour. memcpy of one element compiles to a plain (unaligned-safe) load. */
static uint16_t load_u16(const unsigned char *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

void tt_convert_to_f32(float *dst, const void *src, tt_dtype src_dtype, size_t n) {
    const unsigned char *s = src;
    unsigned char *d = (unsigned char *)dst;
    switch (src_dtype) {
    case TT_F32: memcpy(dst, src, n * 4); break;
    case TT_BF16:
        for (size_t i = 0; i < n; i++) {
            const float f = tt_bf16_to_f32(load_u16(s + 2 * i));
            memcpy(d + 4 * i, &f, 4);
        }
        break;
    case TT_F16:
        for (size_t i = 0; i < n; i++) {
            const float f = tt_f16_to_f32(load_u16(s + 2 * i));
            memcpy(d + 4 * i, &f, 4);
        }
        break;
    case TT_F64:
        for (size_t i = 0; i < n; i++) {
            double v;
            memcpy(&v, s + 8 * i, 8);
            const float f = (float)v;
            memcpy(d + 4 * i, &f, 4);
        }
        break;
    default: TT_CHECK(0, "cannot convert dtype %s to float32", tt_dtype_safetensors_name(src_dtype));
    }
}

void tt_convert_from_f32(void *dst, tt_dtype dst_dtype, const float *src, size_t n) {
    unsigned char *d = dst;
    const unsigned char *s = (const unsigned char *)src;
    switch (dst_dtype) {
    case TT_F32: memcpy(dst, src, n * 4); break;
    case TT_BF16:
    case TT_F16:
        for (size_t i = 0; i < n; i++) {
            float f;
            memcpy(&f, s + 4 * i, 4);
            const uint16_t v = dst_dtype == TT_BF16 ? tt_f32_to_bf16(f) : tt_f32_to_f16(f);
            memcpy(d + 2 * i, &v, 2);
        }
        break;
    default: TT_CHECK(0, "cannot convert float32 to dtype %s", tt_dtype_safetensors_name(dst_dtype));
    }
}
