package engine

import "stx.dev/stx/runtime"

// Memory between the phases of a rollout. Sampling, training and the checkpoint's writing each
// need their own working memory, and what one phase leaves behind idles through the next: the
// host decoder's copy of the weights through the train step, which changes every weight (the
// copy is read again in full before the next sampling anyway), and the train step's pooled
// activations through evaluation, the checkpoint and the next sampling. Both are returned to
// the system at the phase boundary where they are large (runtime.Sampler.ReleaseHostWeights,
// runtime.Backend.ReleaseIdle), so that the run's peak is the largest phase's, not their sum.

// releaseBeforeTrain drops the in-process sampler's copy of the weights when the rollout role
// is about to train them all.
func (l *loop) releaseBeforeTrain() {
	s, ok := l.gen.sampler.(*runtime.Sampler)
	if !ok {
		return // offline data, or a remote engine
	}
	if r := l.rolloutRole(); r == nil || !r.trainable() {
		return // a frozen sampler keeps its weights
	}
	s.ReleaseHostWeights()
}

// releaseAfterTrain returns the train step's pooled storage, which the phases up to the next
// step do not use.
func (l *loop) releaseAfterTrain() { l.backend.ReleaseIdle() }
