package specializations

import "stx.dev/stx/runtime"

// SetDevice places the producer's forward pass on device d of backend; it must be called
// before the first Produce.
func (p *Producer) SetDevice(backend *runtime.Backend, d int) error {
	return p.eval.SetDevice(backend, d)
}
