//go:build cgo && !noopenblas

// Vectorised float32 elementwise kernels; see vec.go. Each kernel is compiled once per level from
// vec_impl.h, for baseline x86-64 (SSE2), AVX2 and AVX-512F, and stx_vec_level picks at run time,
// so the binary still runs on CPUs without AVX2.

// Results must match Go's bit for bit: no fused multiply-adds (GCC contracts a*b+c by default
// in GNU C modes; -std=c11 in vec_cgo.go turns that off too) and no -ffast-math.
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "vec.h"

// stx_round_bf16f rounds a float32 to the nearest bfloat16 value (ties to even, NaN quiet), kept
// as a float32: runtime/cpu's RoundToBF16.
static inline float stx_round_bf16f(float f) {
	uint32_t b;
	memcpy(&b, &f, 4);
	b = (b & 0x7fffffffu) > 0x7f800000u ? (b | 0x00400000u) & 0xffff0000u : (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
	memcpy(&f, &b, 4);
	return f;
}

// STX_VEC_SHUFFLE: __builtin_shufflevector is there (GCC ≥ 12, clang) to split and join
// vectors in registers. STX_VEC_NO_SHUFFLE turns it off (to test the fallback here).
#if defined(__has_builtin) && !defined(STX_VEC_NO_SHUFFLE)
#if __has_builtin(__builtin_shufflevector)
#define STX_VEC_SHUFFLE 1
#endif
#endif

// The two-level build relies on GCC's `#pragma GCC target`; other compilers (clang) and other
// architectures get the portable branch. STX_VEC_PORTABLE forces it (to compile-check it here).
#if defined(__x86_64__) && !defined(__clang__) && !defined(STX_VEC_PORTABLE)

#include <immintrin.h>

typedef float vf4 __attribute__((vector_size(16)));
typedef int32_t vi4 __attribute__((vector_size(16)));
typedef uint32_t vu4 __attribute__((vector_size(16)));
typedef float vf2 __attribute__((vector_size(8)));
typedef double vd2 __attribute__((vector_size(16)));
typedef int64_t vl2 __attribute__((vector_size(16)));
typedef uint64_t vul2 __attribute__((vector_size(16)));

// The square roots use intrinsics: GCC vectorises sqrtf loops only with -fno-math-errno,
// which cgo does not accept. sqrt rounded once to float equals Go's float32(math.Sqrt(
// float64(v))); the reciprocal square root is computed in double as Go does (in float the two
// roundings would differ in the last bit).
static inline vf4 sqrt_v_generic(vf4 v) { return (vf4)_mm_sqrt_ps((__m128)v); }

static inline vf4 rsqrt_v_generic(vf4 v) {
	__m128d lo = _mm_cvtps_pd((__m128)v);
	__m128d hi = _mm_cvtps_pd(_mm_movehl_ps((__m128)v, (__m128)v));
	lo = _mm_div_pd(_mm_set1_pd(1.0), _mm_sqrt_pd(lo));
	hi = _mm_div_pd(_mm_set1_pd(1.0), _mm_sqrt_pd(hi));
	return (vf4)_mm_movelh_ps(_mm_cvtpd_ps(lo), _mm_cvtpd_ps(hi));
}

#define SFX generic
#define W 4
#define VF vf4
#define VI vi4
#define VU vu4
#define VFH vf2
#define VDH vd2
#define VLH vl2
#define VULH vul2
#define HALF_LO(v) __builtin_shufflevector(v, v, 0, 1)
#define HALF_HI(v) __builtin_shufflevector(v, v, 2, 3)
#define JOIN_HALVES(a, b) __builtin_shufflevector(a, b, 0, 1, 2, 3)
#include "vec_impl.h"

#pragma GCC push_options
#pragma GCC target("avx2")

typedef float vf8 __attribute__((vector_size(32)));
typedef int32_t vi8 __attribute__((vector_size(32)));
typedef uint32_t vu8 __attribute__((vector_size(32)));
typedef double vd4 __attribute__((vector_size(32)));
typedef int64_t vl4 __attribute__((vector_size(32)));
typedef uint64_t vul4 __attribute__((vector_size(32)));

static inline vf8 sqrt_v_avx2(vf8 v) { return (vf8)_mm256_sqrt_ps((__m256)v); }

static inline vf8 rsqrt_v_avx2(vf8 v) {
	__m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128((__m256)v));
	__m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps((__m256)v, 1));
	lo = _mm256_div_pd(_mm256_set1_pd(1.0), _mm256_sqrt_pd(lo));
	hi = _mm256_div_pd(_mm256_set1_pd(1.0), _mm256_sqrt_pd(hi));
	return (vf8)_mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1);
}

#define SFX avx2
#define W 8
#define VF vf8
#define VI vi8
#define VU vu8
#define VFH vf4
#define VDH vd4
#define VLH vl4
#define VULH vul4
#define HALF_LO(v) __builtin_shufflevector(v, v, 0, 1, 2, 3)
#define HALF_HI(v) __builtin_shufflevector(v, v, 4, 5, 6, 7)
#define JOIN_HALVES(a, b) __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7)
#include "vec_impl.h"

#pragma GCC pop_options

// AVX-512 (16 lanes) for the elementwise kernels; attend keeps the AVX2 code (dot8's order of
// summation is defined over 8 lanes).
#pragma GCC push_options
#pragma GCC target("avx512f")

typedef float vf16 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));
typedef uint32_t vu16 __attribute__((vector_size(64)));
typedef double vd8 __attribute__((vector_size(64)));
typedef int64_t vl8 __attribute__((vector_size(64)));
typedef uint64_t vul8 __attribute__((vector_size(64)));

static inline vf16 sqrt_v_avx512(vf16 v) { return (vf16)_mm512_sqrt_ps((__m512)v); }

static inline vf16 rsqrt_v_avx512(vf16 v) {
	__m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256((__m512)v));
	__m512d hi = _mm512_cvtps_pd((__m256)_mm512_extractf64x4_pd((__m512d)v, 1));
	lo = _mm512_div_pd(_mm512_set1_pd(1.0), _mm512_sqrt_pd(lo));
	hi = _mm512_div_pd(_mm512_set1_pd(1.0), _mm512_sqrt_pd(hi));
	return (vf16)_mm512_insertf64x4(_mm512_castpd256_pd512((__m256d)_mm512_cvtpd_ps(lo)), (__m256d)_mm512_cvtpd_ps(hi), 1);
}

#define SFX avx512
#define W 16
#define VF vf16
#define VI vi16
#define VU vu16
#define VFH vf8
#define VDH vd8
#define VLH vl8
#define VULH vul8
#define HALF_LO(v) __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7)
#define HALF_HI(v) __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15)
#define JOIN_HALVES(a, b) __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
#include "vec_impl.h"

#pragma GCC pop_options

int stx_vec_level(void) {
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f")) return STX_VEC_AVX512;
	return __builtin_cpu_supports("avx2") ? STX_VEC_AVX2 : STX_VEC_GENERIC;
}

void stx_vec_unary(int level, int op, float *out, const float *x, long n) {
	if (level == STX_VEC_AVX512) {
		unary_avx512(op, out, x, n);
	} else if (level == STX_VEC_AVX2) {
		unary_avx2(op, out, x, n);
	} else {
		unary_generic(op, out, x, n);
	}
}

void stx_vec_binary(int level, int op, int layout, float *out, const float *x, const float *y, float s, long n) {
	if (level == STX_VEC_AVX512) {
		binary_avx512(op, layout, out, x, y, s, n);
	} else if (level == STX_VEC_AVX2) {
		binary_avx2(op, layout, out, x, y, s, n);
	} else {
		binary_generic(op, layout, out, x, y, s, n);
	}
}

void stx_vec_binary_nest(int level, int op, int layout, float *out, const float *x, const float *y, long inner,
	int nd, const long *dims, const long *xs, const long *ys, long lo, long hi) {
	if (level == STX_VEC_AVX512) {
		binary_nest_avx512(op, layout, out, x, y, inner, nd, dims, xs, ys, lo, hi);
	} else if (level == STX_VEC_AVX2) {
		binary_nest_avx2(op, layout, out, x, y, inner, nd, dims, xs, ys, lo, hi);
	} else {
		binary_nest_generic(op, layout, out, x, y, inner, nd, dims, xs, ys, lo, hi);
	}
}

void stx_vec_max_rows(int level, int is_min, float *out, const float *x, long rows, long n) {
	if (level == STX_VEC_AVX512) {
		max_rows_avx512(is_min, out, x, rows, n);
	} else if (level == STX_VEC_AVX2) {
		max_rows_avx2(is_min, out, x, rows, n);
	} else {
		max_rows_generic(is_min, out, x, rows, n);
	}
}

void stx_vec_attend(int level, const float *q, const float *k, const float *v, long n, long hd, float scale, float *sc, float *out, int bf16) {
	if (level == STX_VEC_AVX2 || level == STX_VEC_AVX512) {
		attend_avx2(q, k, v, n, hd, scale, sc, out, bf16);
	} else {
		attend_generic(q, k, v, n, hd, scale, sc, out, bf16);
	}
}

#else

// Other architectures: the same generic-vector code for the baseline target, square roots lane
// by lane.
typedef float vf4 __attribute__((vector_size(16)));
typedef int32_t vi4 __attribute__((vector_size(16)));
typedef uint32_t vu4 __attribute__((vector_size(16)));
typedef float vf2 __attribute__((vector_size(8)));
typedef double vd2 __attribute__((vector_size(16)));
typedef int64_t vl2 __attribute__((vector_size(16)));
typedef uint64_t vul2 __attribute__((vector_size(16)));

static inline vf4 sqrt_v_generic(vf4 v) {
	for (int i = 0; i < 4; i++) v[i] = sqrtf(v[i]);
	return v;
}

static inline vf4 rsqrt_v_generic(vf4 v) {
	for (int i = 0; i < 4; i++) v[i] = (float)(1.0 / sqrt((double)v[i]));
	return v;
}

#define SFX generic
#define W 4
#define VF vf4
#define VI vi4
#define VU vu4
#define VFH vf2
#define VDH vd2
#define VLH vl2
#define VULH vul2
#define HALF_LO(v) __builtin_shufflevector(v, v, 0, 1)
#define HALF_HI(v) __builtin_shufflevector(v, v, 2, 3)
#define JOIN_HALVES(a, b) __builtin_shufflevector(a, b, 0, 1, 2, 3)
#include "vec_impl.h"

int stx_vec_level(void) { return STX_VEC_GENERIC; }

void stx_vec_unary(int level, int op, float *out, const float *x, long n) {
	(void)level;
	unary_generic(op, out, x, n);
}

void stx_vec_binary(int level, int op, int layout, float *out, const float *x, const float *y, float s, long n) {
	(void)level;
	binary_generic(op, layout, out, x, y, s, n);
}

void stx_vec_binary_nest(int level, int op, int layout, float *out, const float *x, const float *y, long inner,
	int nd, const long *dims, const long *xs, const long *ys, long lo, long hi) {
	(void)level;
	binary_nest_generic(op, layout, out, x, y, inner, nd, dims, xs, ys, lo, hi);
}

void stx_vec_max_rows(int level, int is_min, float *out, const float *x, long rows, long n) {
	(void)level;
	max_rows_generic(is_min, out, x, rows, n);
}

void stx_vec_attend(int level, const float *q, const float *k, const float *v, long n, long hd, float scale, float *sc, float *out, int bf16) {
	(void)level;
	attend_generic(q, k, v, n, hd, scale, sc, out, bf16);
}

#endif
