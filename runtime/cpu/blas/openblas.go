//go:build cgo && !noopenblas

package blas

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

typedef void (*sgemm_fn)(int order, int transA, int transB, int m, int n, int k,
	float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
typedef void (*sbgemm_fn)(int order, int transA, int transB, int m, int n, int k,
	float alpha, const unsigned short *a, int lda, const unsigned short *b, int ldb, float beta, float *c, int ldc);
typedef char *(*config_fn)(void);
typedef int (*threads_fn)(void);
typedef void (*set_threads_fn)(int);
typedef char *(*corename_fn)(void);

static sgemm_fn stx_sgemm;
static sbgemm_fn stx_sbgemm;
static config_fn stx_config;
static threads_fn stx_threads;
static set_threads_fn stx_set_threads;
static corename_fn stx_corename;

// stx_blas_open tries each name in turn; returns 0 on success.
static int stx_blas_open(const char *name) {
	void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!h) return 1;
	stx_sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
	if (!stx_sgemm) { dlclose(h); return 2; }
	// Optional: OpenBLAS exports it only when built with BUILD_BFLOAT16 (Debian's 0.3.21 is not).
	stx_sbgemm = (sbgemm_fn)dlsym(h, "cblas_sbgemm");
	stx_config = (config_fn)dlsym(h, "openblas_get_config");
	stx_threads = (threads_fn)dlsym(h, "openblas_get_num_threads");
	stx_corename = (corename_fn)dlsym(h, "openblas_get_corename");
	// One thread by default: on the small products of decoding OpenBLAS's threads cost more than
	// they give (2.5x slower at M=8); Sgemm hands the large ones to stx_blas_sgemm_threads.
	stx_set_threads = (set_threads_fn)dlsym(h, "openblas_set_num_threads");
	if (stx_set_threads) stx_set_threads(1);
	return 0;
}

static int stx_blas_has_sbgemm(void) { return stx_sbgemm != 0; }

static void stx_blas_sbgemm(int transA, int transB, int m, int n, int k, float alpha,
	const unsigned short *a, int lda, const unsigned short *b, int ldb, float beta, float *c, int ldc) {
	stx_sbgemm(101, transA ? 112 : 111, transB ? 112 : 111, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// stx_blas_sbgemm_threads is stx_blas_sgemm_threads for cblas_sbgemm.
static int stx_blas_sbgemm_threads(int threads, int transA, int transB, int m, int n, int k, float alpha,
	const unsigned short *a, int lda, const unsigned short *b, int ldb, float beta, float *c, int ldc) {
	if (!stx_set_threads) return 0;
	stx_set_threads(threads);
	stx_blas_sbgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
	stx_set_threads(1);
	return 1;
}

static const char *stx_blas_config(void) { return stx_config ? stx_config() : ""; }
static const char *stx_blas_corename(void) { return stx_corename ? stx_corename() : ""; }
static int stx_blas_has_pool(void) { return stx_set_threads != 0; }
static int stx_blas_threads(void) { return stx_threads ? stx_threads() : 0; }

static void stx_blas_sgemm(int transA, int transB, int m, int n, int k, float alpha,
	const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
	// 101 = CblasRowMajor, 111 = CblasNoTrans, 112 = CblasTrans.
	stx_sgemm(101, transA ? 112 : 111, transB ? 112 : 111, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// stx_blas_sgemm_threads runs one product on OpenBLAS's own threads, then returns it to one.
// Returns 0 when the library has no openblas_set_num_threads (the caller then splits).
static int stx_blas_sgemm_threads(int threads, int transA, int transB, int m, int n, int k, float alpha,
	const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
	if (!stx_set_threads) return 0;
	stx_set_threads(threads);
	stx_blas_sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
	stx_set_threads(1);
	return 1;
}
*/
import "C"

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"
)

// CompiledIn says whether this binary can use OpenBLAS (cgo, no noopenblas tag).
const CompiledIn = true

// libraryNames are tried in order: the versioned name is what runtime packages install
// (Debian libopenblas0), the bare name what -dev packages add.
var libraryNames = []string{"libopenblas.so.0", "libopenblas.so", "libopenblas.dylib", "libopenblas64_.so.0"}

// threadTimeoutEnv is read by OpenBLAS when it is loaded: log₂ of the CPU cycles its idle pool
// threads spin (calling sched_yield) before they sleep; 2^28 by default, a tenth of a second.
// Between the large products it runs on its pool, stx's own goroutines run the rest of the
// graph on every core, and a spinning pool thread takes CPU time from them; waking a sleeping
// thread costs microseconds against the milliseconds of a product large enough for the pool.
// Measured with stx bench, alternating, 2 cores: with the default instead of 4 the forward is
// 4-11 % slower, the GRPO step 7-11 %, the SFT step 5-8 %. 4 is the smallest value OpenBLAS
// accepts. A value the user set is kept.
const threadTimeoutEnv = "OPENBLAS_THREAD_TIMEOUT"

var load = sync.OnceValues(func() (string, error) {
	if _, set := os.LookupEnv(threadTimeoutEnv); !set {
		// os.Setenv also sets the C environment, where the library reads it when dlopen loads it.
		_ = os.Setenv(threadTimeoutEnv, "4")
	}
	for _, name := range libraryNames {
		cname := C.CString(name)
		rc := C.stx_blas_open(cname)
		C.free(unsafe.Pointer(cname))
		if rc == 0 {
			cfg := strings.TrimSpace(C.GoString(C.stx_blas_config()))
			threads := "its thread pool for large products"
			if C.stx_blas_has_pool() == 0 {
				threads = fmt.Sprintf("%d threads", int(C.stx_blas_threads()))
			}
			return fmt.Sprintf("%s (%s, %s)", name, cfg, threads), nil
		}
	}
	return "", fmt.Errorf("OpenBLAS not found (tried %s); install it (Debian: apt-get install libopenblas0)",
		strings.Join(libraryNames, ", "))
})

// Available reports whether OpenBLAS was loaded; the first call loads it.
func Available() bool {
	_, err := load()
	return err == nil
}

// Name describes the GEMM in use: the OpenBLAS library and its configuration, or why it is
// not used.
func Name() string {
	name, err := load()
	if err != nil {
		return "pure Go (" + err.Error() + ")"
	}
	return name
}

// CoreName is the name of the CPU whose kernels OpenBLAS uses ("Haswell", "SkylakeX", ...;
// OPENBLAS_CORETYPE chooses it), or "" when OpenBLAS is not available or does not say.
func CoreName() string {
	if !Available() {
		return ""
	}
	return C.GoString(C.stx_blas_corename())
}

// poolAvailable says whether OpenBLAS is loaded and can change its thread count, without which
// parallelSgemm splits every product itself.
func poolAvailable() bool {
	return Available() && C.stx_blas_has_pool() != 0
}

func openblasSgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	C.stx_blas_sgemm(cbool(transA), cbool(transB), C.int(m), C.int(n), C.int(k), C.float(alpha),
		(*C.float)(unsafe.Pointer(&a[0])), C.int(lda), (*C.float)(unsafe.Pointer(&b[0])), C.int(ldb),
		C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.int(ldc))
}

// openblasSgemmThreads runs one product on threads of OpenBLAS's own pool (the calling thread
// among them); false when the library cannot change its thread count.
func openblasSgemmThreads(threads int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) bool {
	return C.stx_blas_sgemm_threads(C.int(threads), cbool(transA), cbool(transB), C.int(m), C.int(n), C.int(k), C.float(alpha),
		(*C.float)(unsafe.Pointer(&a[0])), C.int(lda), (*C.float)(unsafe.Pointer(&b[0])), C.int(ldb),
		C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.int(ldc)) != 0
}

// openblasHasSbgemm says whether the loaded OpenBLAS exports cblas_sbgemm.
func openblasHasSbgemm() bool { return Available() && C.stx_blas_has_sbgemm() != 0 }

func ushortPtr(s []uint16) *C.ushort { return (*C.ushort)(unsafe.Pointer(unsafe.SliceData(s))) }

func openblasSbgemm(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	C.stx_blas_sbgemm(cbool(transA), cbool(transB), C.int(m), C.int(n), C.int(k), C.float(alpha),
		ushortPtr(a), C.int(lda), ushortPtr(b), C.int(ldb), C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.int(ldc))
}

func openblasSbgemmThreads(threads int, transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) bool {
	return C.stx_blas_sbgemm_threads(C.int(threads), cbool(transA), cbool(transB), C.int(m), C.int(n), C.int(k), C.float(alpha),
		ushortPtr(a), C.int(lda), ushortPtr(b), C.int(ldb), C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.int(ldc)) != 0
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
