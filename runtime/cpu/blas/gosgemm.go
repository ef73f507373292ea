package blas

import (
	"runtime"
	"sync"
)

// GoSgemm is the portable Sgemm used when OpenBLAS is not available (and by tests as a second
// implementation). It packs op(B) into a contiguous k×n panel so that the inner loop is a
// unit-stride axpy over a row of C, and splits rows of C across cores for large products.
func GoSgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	scaleC(m, n, beta, c, ldc)
	if k == 0 || alpha == 0 {
		return
	}
	// Packed op(B), k×n row-major.
	bp := make([]float32, k*n)
	for p := range k {
		row := bp[p*n : (p+1)*n]
		if transB {
			for j := range n {
				row[j] = b[j*ldb+p]
			}
		} else {
			copy(row, b[p*ldb:p*ldb+n])
		}
	}
	aAt := func(i, p int) float32 {
		if transA {
			return a[p*lda+i]
		}
		return a[i*lda+p]
	}
	rows := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			ci := c[i*ldc : i*ldc+n]
			for p := range k {
				s := alpha * aAt(i, p)
				if s == 0 {
					continue
				}
				bpRow := bp[p*n : (p+1)*n]
				for j, v := range bpRow {
					ci[j] += s * v
				}
			}
		}
	}
	workers := runtime.GOMAXPROCS(0)
	if workers == 1 || m*n*k < 1<<18 || m < 2 {
		rows(0, m)
		return
	}
	workers = min(workers, m)
	var wg sync.WaitGroup
	chunk := (m + workers - 1) / workers
	for lo := 0; lo < m; lo += chunk {
		hi := min(lo+chunk, m)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows(lo, hi)
		}()
	}
	wg.Wait()
}
