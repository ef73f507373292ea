// Kernel bodies of vec.c, compiled once per instruction-set level: vec.c includes this file
// with SFX (the function-name suffix), W (lanes per vector) and the vector types VF (float),
// VI (int32) and VU (uint32) of W lanes, and VFH (float), VDH (double), VLH (int64) and VULH
// (uint64) of W/2 lanes defined, with HALF_LO, HALF_HI and JOIN_HALVES to split and join VF, under the matching `#pragma GCC target`, after the
// per-level helpers sqrt_v_SFX and rsqrt_v_SFX (vec.c); it undefines them at its end.
//
// The code is written with GCC's generic vector extensions, so one source serves every level;
// it must give the same bits at every level and the same bits as the Go loops it replaces
// (no fused multiply-adds: see vec.c).

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, SFX)

static inline VF FN(load)(const float *p) {
	VF v;
	memcpy(&v, p, sizeof v);
	return v;
}

static inline void FN(store)(float *p, VF v) { memcpy(p, &v, sizeof v); }

// splat copies s into every lane (not 0 + s, which would turn -0 into +0).
static inline VF FN(splat)(float s) {
	VF v;
	for (int i = 0; i < W; i++) v[i] = s;
	return v;
}

// all_set reports whether every lane of m is non-zero (m holds comparison results, 0 or -1).
static inline int FN(all_set)(VI m) {
	uint64_t w[W / 2];
	VI inv = ~m;
	memcpy(w, &inv, sizeof w);
	uint64_t any = 0;
	for (int i = 0; i < W / 2; i++) any |= w[i];
	return any == 0;
}

// exp_v is expf32 of fastmath.go lane by lane, with the same operations in the same order,
// so the results are bit-identical. Lanes outside [-87, 87] (and NaN) take expf32's slow
// path: 0 below -104 (all lanes at once), else the double-precision exp rounded to float.
static inline VF FN(exp_v)(VF x) {
	const float log2e = 1.44269504088896341f;
	const float ln2_hi = 0.693359375f;
	const float ln2_lo = -2.12194440e-4f;
	const float shifter = 12582912.0f; // 1.5·2^23: rounds to an integer in the low bits
	VF k = x * log2e + shifter;
	VU n = (VU)k - 0x4B400000u;
	VF fn = k - shifter;
	VF r = x - fn * ln2_hi - fn * ln2_lo;
	VF p = r * 1.9875691500e-4f + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	VF y = p * r * r + r + 1.0f;
	y = y * (VF)((n + 127u) << 23);
	VI ok = (x >= -87.0f) & (x <= 87.0f);
	if (__builtin_expect(!FN(all_set)(ok), 0)) {
		// Lanes below -104 (masked attention scores, a quarter to a half of a causal
		// softmax's) are 0 without the lane-by-lane loop, which only the rest still take.
		VI zero = x < -104.0f;
		y = (VF)((VI)y & ~zero);
		ok |= zero;
		if (!FN(all_set)(ok)) {
			for (int i = 0; i < W; i++) {
				if (!ok[i]) y[i] = (float)exp((double)x[i]);
			}
		}
	}
	return y;
}

// log_half is log over half a vector (VFH, W/2 lanes) in double (VDH, W/2 lanes: the native
// double width, which GCC keeps in vector registers; wider vectors it splits lane by lane).
// x = 2^e·m with m in (√½, √2], log m = 2·atanh(s) with s = (m-1)/(m+1), |s| ≤ 0.172, summed
// to s^15 (truncation error below 4e-14 relative). Only positive finite lanes are meaningful.
static inline VFH FN(log_half)(VFH x) {
	VDH d = __builtin_convertvector(x, VDH); // exact, subnormal floats included
	VLH u = (VLH)d;
	VLH eb = (VLH)(((VULH)u >> 52) & 0x7ff);
	VDH m = (VDH)((u & 0x000fffffffffffffLL) | 0x3ff0000000000000LL);
	VLH big = m > 1.4142135623730951;
	m = (VDH)(((VLH)(m * 0.5) & big) | ((VLH)m & ~big));
	// The exponent as a double without an int64 conversion (AVX2 has none): 2^52 + eb, exact.
	VDH e = (VDH)(eb | 0x4330000000000000LL) - 4503599627370496.0;
	VDH one = (VDH){0} + 1.0;
	e = e - 1023.0 + (VDH)((VLH)one & big);
	VDH f = m - 1.0; // exact (Sterbenz)
	VDH s = f / (2.0 + f);
	VDH z = s * s;
	VDH p = z * (1.0 / 15) + 1.0 / 13;
	p = p * z + 1.0 / 11;
	p = p * z + 1.0 / 9;
	p = p * z + 1.0 / 7;
	p = p * z + 1.0 / 5;
	p = p * z + 1.0 / 3;
	VDH twos = s + s;
	VDH r = e * 0.6931471805599453 + (twos + twos * z * p);
	return __builtin_convertvector(r, VFH);
}

// log_v is Go's float32(math.Log(float64(v))): the logarithm evaluated in double, so that its
// rounding to float agrees with Go's except where the exact value lies within ~1e-14 of a
// rounding boundary (none in the tests' 300,000 points).
static inline VF FN(log_v)(VF x) {
#ifdef STX_VEC_SHUFFLE
	// Register shuffles (GCC ≥ 12, clang): the memcpy split below goes through the stack.
	VFH lo = FN(log_half)(HALF_LO(x)), hi = FN(log_half)(HALF_HI(x));
	VF y = JOIN_HALVES(lo, hi);
#else
	VFH lo, hi;
	memcpy(&lo, &x, sizeof lo);
	memcpy(&hi, (char *)&x + sizeof lo, sizeof hi);
	lo = FN(log_half)(lo);
	hi = FN(log_half)(hi);
	VF y;
	memcpy(&y, &lo, sizeof lo);
	memcpy((char *)&y + sizeof lo, &hi, sizeof hi);
#endif
	// log(±0) = -Inf, log(+Inf) = +Inf, log of a negative number or NaN is NaN.
	VI zero = x == 0.0f, pinf = x == INFINITY, bad = ~(x >= 0.0f);
	y = (VF)(((VI)y & ~zero) | ((VI)FN(splat)(-INFINITY) & zero));
	y = (VF)(((VI)y & ~pinf) | ((VI)FN(splat)(INFINITY) & pinf));
	y = (VF)(((VI)y & ~bad) | ((VI)FN(splat)(NAN) & bad));
	return y;
}

// Go's max and min on floats (runtime fmax/fmin): NaN if either operand is NaN (y's NaN when
// both are), max(-0, +0) = +0 and min(-0, +0) = -0.
static inline VF FN(max_v)(VF x, VF y) {
	VI pick_y = (y != y) | (y > x);
	VI eq = (x == y); // equal non-zero floats have equal bits; for ±0 AND the bits
	VI base = ((VI)x & (VI)y & eq) | ((VI)x & ~eq);
	return (VF)(((VI)y & pick_y) | (base & ~pick_y));
}

static inline VF FN(min_v)(VF x, VF y) {
	VI pick_y = (y != y) | (y < x);
	VI eq = (x == y); // for ±0 OR the bits
	VI base = (((VI)x | (VI)y) & eq) | ((VI)x & ~eq);
	return (VF)(((VI)y & pick_y) | (base & ~pick_y));
}

// UNARY_LOOP runs expr (of the vector v) over x in W-lane blocks; the tail goes through a
// zero-padded block so that every element is computed by the same code.
#define UNARY_LOOP(expr)                                   \
	do {                                                   \
		long i = 0;                                        \
		for (; i + W <= n; i += W) {                       \
			VF v = FN(load)(x + i);                        \
			FN(store)(out + i, (expr));                    \
		}                                                  \
		if (i < n) {                                       \
			float tmp[W] = {0};                            \
			memcpy(tmp, x + i, (size_t)(n - i) * 4);       \
			VF v = FN(load)(tmp);                          \
			FN(store)(tmp, (expr));                        \
			memcpy(out + i, tmp, (size_t)(n - i) * 4);     \
		}                                                  \
	} while (0)

static void FN(unary)(int op, float *out, const float *x, long n) {
	switch (op) {
	case STX_VEC_EXP:
		UNARY_LOOP(FN(exp_v)(v));
		break;
	case STX_VEC_LOGISTIC:
		// As fastmath.go: 1/(1+e^-x); e^-x overflowing to +Inf gives the correct 0.
		UNARY_LOOP(1.0f / (1.0f + FN(exp_v)(-v)));
		break;
	case STX_VEC_NEG:
		UNARY_LOOP((VF)((VU)v ^ 0x80000000u));
		break;
	case STX_VEC_ABS: {
		// Go computes float32(math.Abs(float64(v))): the sign cleared, and a signalling NaN
		// quietened by the two conversions.
		UNARY_LOOP(({
			VU a = (VU)v & 0x7fffffffu;
			(VF)(a | ((VU)(a > 0x7f800000u) & 0x00400000u));
		}));
		break;
	}
	case STX_VEC_SQRT:
		UNARY_LOOP(FN(sqrt_v)(v));
		break;
	case STX_VEC_RSQRT:
		UNARY_LOOP(FN(rsqrt_v)(v));
		break;
	case STX_VEC_LOG:
		UNARY_LOOP(FN(log_v)(v));
		break;
	}
}

// BINARY_LOOPS expands the three operand layouts of one op, expr being a function of the
// vectors a and b.
#define BINARY_LOOPS(expr)                                         \
	do {                                                           \
		long i = 0;                                                \
		switch (layout) {                                          \
		case STX_VEC_VV:                                           \
			for (; i + W <= n; i += W) {                           \
				VF a = FN(load)(x + i), b = FN(load)(y + i);       \
				FN(store)(out + i, (expr));                        \
			}                                                      \
			break;                                                 \
		case STX_VEC_VS: {                                         \
			VF b = FN(splat)(s);                                 \
			for (; i + W <= n; i += W) {                           \
				VF a = FN(load)(x + i);                            \
				FN(store)(out + i, (expr));                        \
			}                                                      \
			break;                                                 \
		}                                                          \
		case STX_VEC_SV: {                                         \
			VF a = FN(splat)(s);                                 \
			for (; i + W <= n; i += W) {                           \
				VF b = FN(load)(y + i);                            \
				FN(store)(out + i, (expr));                        \
			}                                                      \
			break;                                                 \
		}                                                          \
		}                                                          \
		if (i < n) {                                               \
			float ta[W] = {0}, tb[W] = {0};                        \
			size_t bytes = (size_t)(n - i) * 4;                    \
			if (layout == STX_VEC_SV) {                            \
				for (int j = 0; j < W; j++) ta[j] = s;          \
			} else {                                               \
				memcpy(ta, x + i, bytes);                          \
			}                                                      \
			if (layout == STX_VEC_VS) {                            \
				for (int j = 0; j < W; j++) tb[j] = s;          \
			} else {                                               \
				memcpy(tb, y + i, bytes);                          \
			}                                                      \
			VF a = FN(load)(ta), b = FN(load)(tb);                 \
			FN(store)(ta, (expr));                                 \
			memcpy(out + i, ta, bytes);                            \
		}                                                          \
	} while (0)

static void FN(binary)(int op, int layout, float *out, const float *x, const float *y, float s, long n) {
	switch (op) {
	case STX_VEC_ADD:
		BINARY_LOOPS(a + b);
		break;
	case STX_VEC_SUB:
		BINARY_LOOPS(a - b);
		break;
	case STX_VEC_MUL:
		BINARY_LOOPS(a * b);
		break;
	case STX_VEC_DIV:
		BINARY_LOOPS(a / b);
		break;
	case STX_VEC_MAX:
		BINARY_LOOPS(FN(max_v)(a, b));
		break;
	case STX_VEC_MIN:
		BINARY_LOOPS(FN(min_v)(a, b));
		break;
	}
}

// NEST_LOOPS runs BINARY_LOOPS(expr) over rows lo..hi-1 of a broadcast loop nest (see
// stx_vec_binary_nest), one op and layout for all rows: the per-row cost is a few additions,
// which counts for short rows (RoPE's 32).
#define NEST_LOOPS(expr)                                                                   \
	do {                                                                                   \
		long idx[STX_VEC_MAX_NEST];                                                        \
		long xo = 0, yo = 0, r = lo;                                                       \
		for (int k = nd - 1; k >= 0; k--) {                                                \
			idx[k] = r % dims[k];                                                          \
			r /= dims[k];                                                                  \
			xo += idx[k] * xs[k];                                                          \
			yo += idx[k] * ys[k];                                                          \
		}                                                                                  \
		for (long o = lo; o < hi; o++) {                                                   \
			{                                                                              \
				float *out = out0 + o * inner;                                             \
				const float *x = x0 + xo, *y = y0 + yo;                                    \
				float s = layout == STX_VEC_VS ? y[0] : layout == STX_VEC_SV ? x[0] : 0.0f; \
				long n = inner;                                                            \
				BINARY_LOOPS(expr);                                                        \
			}                                                                              \
			for (int k = nd - 1; k >= 0; k--) {                                            \
				idx[k]++;                                                                  \
				xo += xs[k];                                                               \
				yo += ys[k];                                                               \
				if (idx[k] < dims[k]) break;                                               \
				xo -= dims[k] * xs[k];                                                     \
				yo -= dims[k] * ys[k];                                                     \
				idx[k] = 0;                                                                \
			}                                                                              \
		}                                                                                  \
	} while (0)

static void FN(binary_nest)(int op, int layout, float *out0, const float *x0, const float *y0, long inner, int nd,
	const long *dims, const long *xs, const long *ys, long lo, long hi) {
	switch (op) {
	case STX_VEC_ADD:
		NEST_LOOPS(a + b);
		break;
	case STX_VEC_SUB:
		NEST_LOOPS(a - b);
		break;
	case STX_VEC_MUL:
		NEST_LOOPS(a * b);
		break;
	case STX_VEC_DIV:
		NEST_LOOPS(a / b);
		break;
	case STX_VEC_MAX:
		NEST_LOOPS(FN(max_v)(a, b));
		break;
	case STX_VEC_MIN:
		NEST_LOOPS(FN(min_v)(a, b));
		break;
	}
}

// fold_max_v folds W lanes into one with Go's max or min (order-independent), in log2(W)
// steps: the vector against itself shifted by half, a quarter, ...
static inline float FN(fold_max_v)(VF m, int is_min) {
	float t[2 * W];
	for (int h = W / 2; h >= 1; h /= 2) {
		FN(store)(t, m);
		FN(store)(t + W, m);
		VF sh = FN(load)(t + h);
		m = is_min ? FN(min_v)(m, sh) : FN(max_v)(m, sh);
	}
	return m[0];
}

// max_rows is stx_vec_max_rows: each row folded into four vectors of W lanes (independent
// chains), the tail through a block padded with the identity, then everything into one.
static void FN(max_rows)(int is_min, float *out, const float *x, long rows, long n) {
	const float id = is_min ? INFINITY : -INFINITY;
	for (long r = 0; r < rows; r++) {
		const float *row = x + r * n;
		VF a0 = FN(splat)(id), a1 = a0, a2 = a0, a3 = a0;
		long i = 0;
		if (is_min) {
			for (; i + 4 * W <= n; i += 4 * W) {
				a0 = FN(min_v)(a0, FN(load)(row + i));
				a1 = FN(min_v)(a1, FN(load)(row + i + W));
				a2 = FN(min_v)(a2, FN(load)(row + i + 2 * W));
				a3 = FN(min_v)(a3, FN(load)(row + i + 3 * W));
			}
			for (; i + W <= n; i += W) a0 = FN(min_v)(a0, FN(load)(row + i));
		} else {
			for (; i + 4 * W <= n; i += 4 * W) {
				a0 = FN(max_v)(a0, FN(load)(row + i));
				a1 = FN(max_v)(a1, FN(load)(row + i + W));
				a2 = FN(max_v)(a2, FN(load)(row + i + 2 * W));
				a3 = FN(max_v)(a3, FN(load)(row + i + 3 * W));
			}
			for (; i + W <= n; i += W) a0 = FN(max_v)(a0, FN(load)(row + i));
		}
		if (i < n) {
			float t[W];
			for (int j = 0; j < W; j++) t[j] = id;
			memcpy(t, row + i, (size_t)(n - i) * 4);
			a1 = is_min ? FN(min_v)(a1, FN(load)(t)) : FN(max_v)(a1, FN(load)(t));
		}
		VF m = is_min ? FN(min_v)(FN(min_v)(a0, a1), FN(min_v)(a2, a3)) : FN(max_v)(FN(max_v)(a0, a1), FN(max_v)(a2, a3));
		out[r] = FN(fold_max_v)(m, is_min);
	}
}

#if W <= 8
// dot8 returns x·y over n elements as eight interleaved partial sums (element i into sum
// i mod 8, a zero-padded block for the tail) combined as ((s0+s4)+(s2+s6))+((s1+s5)+(s3+s7)):
// the same operations in the same order at every level (W = 4 keeps two vectors per block).
static inline float FN(dot8)(const float *x, const float *y, long n) {
	VF acc[8 / W];
	for (int u = 0; u < 8 / W; u++) acc[u] = FN(splat)(0.0f);
	long i = 0;
	for (; i + 8 <= n; i += 8) {
		for (int u = 0; u < 8 / W; u++) acc[u] += FN(load)(x + i + u * W) * FN(load)(y + i + u * W);
	}
	if (i < n) {
		float tx[8] = {0}, ty[8] = {0};
		memcpy(tx, x + i, (size_t)(n - i) * 4);
		memcpy(ty, y + i, (size_t)(n - i) * 4);
		for (int u = 0; u < 8 / W; u++) acc[u] += FN(load)(tx + u * W) * FN(load)(ty + u * W);
	}
	float a[8];
	memcpy(a, acc, sizeof a);
	return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

// attend is one attention head over n cached positions (see stx_vec_attend). The softmax and
// the weighted sum of the values take the operations of the Go loops they replace
// (softmaxUnnormalised, weightedSum in runtime/hostdecode.go) in the same order; only the
// query·key products are summed in another order (dot8).
// With bf16 it computes what a model's two bfloat16 products compute (runtime's attention in
// bfloat16: q already scaled and rounded, keys and values rounded): each score rounded to
// bfloat16, the softmax's numerators rounded for the weighted sum (the denominator summed
// before), and that sum rounded before it is divided by the denominator.
static void FN(attend)(const float *q, const float *k, const float *v, long n, long hd, float scale, float *sc, float *out, int bf16) {
	for (long j = 0; j < n; j++) sc[j] = FN(dot8)(q, k + j * hd, hd) * scale;
	if (bf16)
		for (long j = 0; j < n; j++) sc[j] = stx_round_bf16f(sc[j]);
	float mx = -__builtin_inff();
	for (long j = 0; j < n; j++) mx = sc[j] > mx || sc[j] != sc[j] ? sc[j] : mx;
	long j = 0;
	for (; j + W <= n; j += W) FN(store)(sc + j, FN(exp_v)(FN(load)(sc + j) - mx));
	if (j < n) {
		float tmp[W] = {0};
		memcpy(tmp, sc + j, (size_t)(n - j) * 4);
		FN(store)(tmp, FN(exp_v)(FN(load)(tmp) - mx));
		memcpy(sc + j, tmp, (size_t)(n - j) * 4);
	}
	float den = 0;
	for (j = 0; j < n; j++) den += sc[j];
	const float inv = 1 / den;
	if (bf16)
		for (j = 0; j < n; j++) sc[j] = stx_round_bf16f(sc[j]);
	memset(out, 0, (size_t)hd * 4);
	// Four positions at a time: out + (((p0·r0 + p1·r1) + p2·r2) + p3·r3), as the Go loop.
	for (j = 0; j + 4 <= n; j += 4) {
		const float p0 = sc[j], p1 = sc[j + 1], p2 = sc[j + 2], p3 = sc[j + 3];
		const float *r0 = v + j * hd, *r1 = r0 + hd, *r2 = r1 + hd, *r3 = r2 + hd;
		const VF v0 = FN(splat)(p0), v1 = FN(splat)(p1), v2 = FN(splat)(p2), v3 = FN(splat)(p3);
		long i = 0;
		for (; i + W <= hd; i += W) {
			VF s = v0 * FN(load)(r0 + i) + v1 * FN(load)(r1 + i) + v2 * FN(load)(r2 + i) + v3 * FN(load)(r3 + i);
			FN(store)(out + i, FN(load)(out + i) + s);
		}
		for (; i < hd; i++) out[i] += p0 * r0[i] + p1 * r1[i] + p2 * r2[i] + p3 * r3[i];
	}
	for (; j < n; j++) {
		const float pj = sc[j];
		const float *r = v + j * hd;
		const VF vp = FN(splat)(pj);
		long i = 0;
		for (; i + W <= hd; i += W) FN(store)(out + i, FN(load)(out + i) + vp * FN(load)(r + i));
		for (; i < hd; i++) out[i] += pj * r[i];
	}
	if (bf16) {
		for (long i = 0; i < hd; i++) out[i] = stx_round_bf16f(out[i]) / den;
		return;
	}
	const VF vi = FN(splat)(inv);
	long i = 0;
	for (; i + W <= hd; i += W) FN(store)(out + i, FN(load)(out + i) * vi);
	for (; i < hd; i++) out[i] *= inv;
}

#undef UNARY_LOOP
#undef BINARY_LOOPS
#undef NEST_LOOPS
#endif // W <= 8: the AVX-512 level runs attend at AVX2

// The level's parameters end here, so that vec.c can define them again for the next level.
#undef SFX
#undef W
#undef VF
#undef VI
#undef VU
#undef VFH
#undef VDH
#undef VLH
#undef VULH
#undef HALF_LO
#undef HALF_HI
#undef JOIN_HALVES
