package runtime

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// MicroBatchArgs checks that every micro-batch has the same keys and returns each one's tensors
// as positional executor arguments in sorted-key order. *keys holds the keys a trainer was
// compiled for: set from the first micro-batch when nil, checked against afterwards.
func MicroBatchArgs(keys *[]string, microBatches []map[string]*tensors.Tensor) ([][]any, error) {
	if len(microBatches) == 0 {
		return nil, fmt.Errorf("no micro-batches")
	}
	args := make([][]any, len(microBatches))
	for i, mb := range microBatches {
		got := slices.Sorted(maps.Keys(mb))
		if *keys == nil {
			*keys = got
		}
		if !slices.Equal(got, *keys) {
			return nil, fmt.Errorf("micro-batch %d has keys %v, the trainer was compiled for %v", i, got, *keys)
		}
		a := make([]any, len(got))
		for j, k := range got {
			a[j] = mb[k]
		}
		args[i] = a
	}
	return args, nil
}

// CombineMetric folds one micro-batch's metric into the step's value. Loss terms and counts are
// computed per micro-batch already scaled by the whole mini-batch, so they add up; extremes
// (names ending in "_max" or "_min") take the max or min instead — summing them would report
// k times the value.
func CombineMetric(name string, acc, v float64, first bool) float64 {
	switch {
	case first:
		return v
	case strings.HasSuffix(name, "_max"):
		return math.Max(acc, v)
	case strings.HasSuffix(name, "_min"):
		return math.Min(acc, v)
	}
	return acc + v
}
