package kernels

// Index is an integer type used for gather/scatter indices and argmin/argmax outputs.
type Index interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~int | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// Number is an element type that can be summed and compared.
type Number interface {
	~float32 | ~float64 | ~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// ReduceOp selects the reduction.
type ReduceOp int

const (
	// ReduceSum adds the reduced elements; the sum of nothing is 0.
	ReduceSum ReduceOp = iota
	// ReduceProduct multiplies the reduced elements; the product of nothing is 1.
	ReduceProduct
	// ReduceMax takes the largest element (NaN if any is NaN); the max of nothing is -Inf or
	// the type's minimum.
	ReduceMax
	// ReduceMin takes the smallest element (NaN if any is NaN); the min of nothing is +Inf or
	// the type's maximum.
	ReduceMin
)

// String names the reduction, for error messages.
func (op ReduceOp) String() string {
	switch op {
	case ReduceSum:
		return "sum"
	case ReduceProduct:
		return "product"
	case ReduceMax:
		return "max"
	case ReduceMin:
		return "min"
	}
	return "ReduceOp(?)"
}

// PadAxis configures Pad along one axis (XLA semantics): Start and End elements of padding
// before and after (negative values crop), and Interior elements between each pair of
// consecutive source elements (>= 0).
type PadAxis struct{ Start, End, Interior int }
