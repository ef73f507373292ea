package specializations

import "stx.dev/stx/runtime"

// SetDevices places the producer's forward pass on devices of backend (its rows split among
// them when several); it must be called before the first Produce.
func (p *Producer) SetDevices(backend *runtime.Backend, devices []int) error {
	return p.eval.SetDevices(backend, devices)
}
