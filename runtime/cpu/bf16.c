//go:build cgo && !noopenblas

// bfloat16 conversions for the cpu backend (bf16.go): float32 → bfloat16 rounding to nearest
// even (NaN kept quiet, overflow to ±Inf) and bfloat16 → float32 (exact), with the same bits as
// the Go loops they replace. Plain loops that GCC vectorises, compiled for baseline x86-64 and
// for AVX2 and AVX-512 (picked with vec.c's level).

#include <stdint.h>
#include <string.h>

#include "vec.h"

// round_bits returns the bfloat16 nearest to the float32 of bits b, in the upper 16 bits of the
// result (the lower ones zero).
static inline uint32_t round_bits(uint32_t b) {
	uint32_t r = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
	uint32_t q = (b | 0x00400000u) & 0xffff0000u; // NaN: quiet, sign and payload top kept
	return (b & 0x7fffffffu) > 0x7f800000u ? q : r;
}

#define STX_BF16_KERNELS(SFX)                                                                          \
	static void narrow_##SFX(uint16_t *restrict dst, const uint32_t *restrict src, long n) {       \
		for (long i = 0; i < n; i++) dst[i] = (uint16_t)(round_bits(src[i]) >> 16);              \
	}                                                                                              \
	static void widen_##SFX(uint32_t *restrict dst, const uint16_t *restrict src, long n) {        \
		for (long i = 0; i < n; i++) dst[i] = (uint32_t)src[i] << 16;                              \
	}                                                                                              \
	static void round_##SFX(uint32_t *dst, const uint32_t *src, long n) {                          \
		for (long i = 0; i < n; i++) dst[i] = round_bits(src[i]);                                  \
	}

STX_BF16_KERNELS(generic)

#if defined(__x86_64__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC target("avx2")
STX_BF16_KERNELS(avx2)
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f")
STX_BF16_KERNELS(avx512)
#pragma GCC pop_options
#define STX_BF16_DISPATCH(name, ...)                                                                   \
	switch (level) {                                                                               \
	case STX_VEC_AVX512: name##_avx512(__VA_ARGS__); return;                                       \
	case STX_VEC_AVX2: name##_avx2(__VA_ARGS__); return;                                           \
	default: name##_generic(__VA_ARGS__); return;                                                  \
	}
#else
#define STX_BF16_DISPATCH(name, ...) name##_generic(__VA_ARGS__)
#endif

void stx_bf16_narrow(int level, unsigned short *dst, const float *src, long n) {
	STX_BF16_DISPATCH(narrow, dst, (const uint32_t *)src, n);
}

void stx_bf16_widen(int level, float *dst, const unsigned short *src, long n) {
	STX_BF16_DISPATCH(widen, (uint32_t *)dst, src, n);
}

void stx_bf16_round(int level, float *dst, const float *src, long n) {
	STX_BF16_DISPATCH(round, (uint32_t *)dst, (const uint32_t *)src, n);
}
