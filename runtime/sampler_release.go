package runtime

import "runtime/debug"

// ReleaseHostWeights drops the host decoder's copy of the weights and the key/value caches the
// sampler keeps between calls, and returns their memory to the system, when that is worth it
// (worthReleasing): for a caller about to change every weight (a full train step), after which
// the next Generate reads the weights again in full anyway, so that the step has that memory
// (2 GB at 0.5B parameters in float32). A LoRA model's adapters are all that change, and the
// decoder rereads only what they touch: its copy is kept. It returns the bytes released, as
// estimated from the model's size.
func (s *Sampler) ReleaseHostWeights() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.host == nil || s.m.LoRA() != nil {
		return 0
	}
	perValue := int64(4)
	if s.m.MixedPrecision() {
		perValue = 2 // the projections are held in bfloat16
	}
	n := int64(s.m.Config.NumParams()) * perValue
	if !worthReleasing(n) {
		return 0
	}
	s.releaseHost()
	debug.FreeOSMemory()
	return n
}

// releaseHost drops the host decoder and the kept caches (s.mu held): the next Generate
// builds them again from the model's weights.
func (s *Sampler) releaseHost() { s.host, s.kCache, s.vCache = nil, nil, nil }
