//go:build unix

package cpu

import (
	"fmt"
	"syscall"
)

const defaultOffHeapMin = 256 << 10

// mapMemory returns size bytes of zeroed, private memory outside the Go heap.
func mapMemory(size int) ([]byte, error) {
	data, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, fmt.Errorf("cpu backend: mapping %d bytes: %w", size, err)
	}
	// No MADV_HUGEPAGE: where the kernel compacts memory to grant it ("defrag: madvise"), the
	// compaction cost more system time than the saved page faults (measured: 53 s against 19 s
	// of system time for a bench-model train step at 2,048 tokens).
	return data, nil
}

// unmapMemory returns a mapping to the system.
func unmapMemory(data []byte) {
	if err := syscall.Munmap(data); err != nil {
		// Only a bad address fails, which would be a bug of the pool's.
		panic(fmt.Sprintf("cpu backend: unmapping %d bytes: %v", len(data), err))
	}
}
