// Vectorised float32 elementwise kernels for stx's cpu backend (see vec.go).
#ifndef STX_VEC_H
#define STX_VEC_H

// Instruction-set levels: the kernels are compiled once per level and the caller picks one
// (normally stx_vec_level(); the tests run every level the CPU supports).
enum { STX_VEC_GENERIC = 0, STX_VEC_AVX2 = 1, STX_VEC_AVX512 = 2 };

// Unary ops of stx_vec_unary.
enum {
	STX_VEC_EXP = 0,
	STX_VEC_LOGISTIC = 1,
	STX_VEC_NEG = 2,
	STX_VEC_ABS = 3,
	STX_VEC_SQRT = 4,
	STX_VEC_RSQRT = 5,
	STX_VEC_LOG = 6,
};

// Binary ops of stx_vec_binary.
enum {
	STX_VEC_ADD = 0,
	STX_VEC_SUB = 1,
	STX_VEC_MUL = 2,
	STX_VEC_DIV = 3,
	STX_VEC_MAX = 4,
	STX_VEC_MIN = 5,
};

// Operand layouts of stx_vec_binary: both vectors, y the scalar s, x the scalar s.
enum { STX_VEC_VV = 0, STX_VEC_VS = 1, STX_VEC_SV = 2 };

// stx_vec_level returns the best level this CPU supports.
int stx_vec_level(void);

// stx_vec_unary sets out[i] = op(x[i]) for i < n. out may be x itself.
void stx_vec_unary(int level, int op, float *out, const float *x, long n);

// stx_vec_binary sets out[i] = x[i] op y[i] for i < n; in the VS and SV layouts the scalar s
// stands for y or x (that pointer is unused). out may be x or y itself.
void stx_vec_binary(int level, int op, int layout, float *out, const float *x, const float *y, float s, long n);

// STX_VEC_MAX_NEST is the most outer axes stx_vec_binary_nest takes.
enum { STX_VEC_MAX_NEST = 8 };

// stx_vec_binary_nest runs stx_vec_binary over rows lo..hi-1 of a broadcast loop nest: row r,
// decoded row-major over the nd outer axes dims, has the multi-index i and writes
// out[r*inner .. (r+1)*inner) from x at offset Σ i[k]·xs[k] and y at Σ i[k]·ys[k] (strides
// 0 along the axes an operand is broadcast on). In the VS layout y's element at the row's
// offset is the scalar, in SV x's. nd ≤ STX_VEC_MAX_NEST.
void stx_vec_binary_nest(int level, int op, int layout, float *out, const float *x, const float *y, long inner,
	int nd, const long *dims, const long *xs, const long *ys, long lo, long hi);

// stx_vec_max_rows sets out[r] to the max (min when is_min) of x[r*n .. (r+1)*n) for r < rows,
// with Go's max and min (NaN wins; max(-0, +0) = +0, min(-0, +0) = -0), which do not depend on
// the order: -Inf (+Inf) for n = 0.
void stx_vec_max_rows(int level, int is_min, float *out, const float *x, long rows, long n);

// stx_vec_attend computes one attention head's output out[hd] for the query q[hd] over n
// positions of keys k and values v ([n, hd] each): sc[j] = scale·(q·k_j), then
// out = Σ_j e^(sc[j] − max sc)·v_j / Σ_j e^(sc[j] − max sc). sc (n floats) is scratch, left
// holding the unnormalised weights. With bf16, the scores, the weights of the sum and the sum
// are rounded to bfloat16 as a bfloat16 model's products round them (see vec_impl.h).
void stx_vec_attend(int level, const float *q, const float *k, const float *v, long n, long hd, float scale, float *sc, float *out, int bf16);

// bfloat16 conversions (bf16.c), as the Go loops of bf16.go: stx_bf16_narrow rounds float32 to
// bfloat16 bits (nearest even, NaN quiet), stx_bf16_widen widens them back (exact), and
// stx_bf16_round rounds float32 to the nearest bfloat16 value kept as float32 (dst may be src).
void stx_bf16_narrow(int level, unsigned short *dst, const float *src, long n);
void stx_bf16_widen(int level, float *dst, const unsigned short *src, long n);
void stx_bf16_round(int level, float *dst, const float *src, long n);

#endif
