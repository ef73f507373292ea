//go:build !unix

package cpu

import "errors"

// Without mappings every buffer stays on the Go heap.
const defaultOffHeapMin = 0

func mapMemory(int) ([]byte, error) { return nil, errors.New("cpu backend: no memory mappings") }

func unmapMemory([]byte) {}
