package engine

import (
	"fmt"
	"math"

	"stx.dev/stx/schema"
)

// Objective is the number a recipe family is about, read from a run's metrics: what the
// closing line of `stx run` and `stx plot` report (the arithmetic accuracy of a DPO run's
// greedy answers says little about DPO).
type Objective struct {
	// Name is what the number is called ("preference accuracy", "teacher KL", ...).
	Name string
	// Key is the metric it is read from.
	Key string
	// Window > 0: the first and last values are means over the first and last Window
	// optimizer steps (a per-step training metric, noisy); 0: the first and last values of
	// the key (an evaluation metric, recorded at the evaluation cadence).
	Window int
	// Lower is true when a lower value is better (losses, KL).
	Lower bool
	// WithAccuracy: validation accuracy on the task means something for the family too
	// (SFT and the students of a teacher learn the task itself), so reports show it beside
	// the objective.
	WithAccuracy bool
}

// objectiveWindow is the number of steps a training-metric objective is averaged over.
const objectiveWindow = 10

// ObjectiveFor is the objective of rec's family, from the data kind of its first trainable
// role: preference accuracy for pairwise preference roles (DPO, IPO, SimPO, ORPO, the
// reward model), label accuracy for KTO, the validation KL to the teacher for roles taught
// by one, validation accuracy for RL, the loss for SFT and flow matching, the validation
// reward for Flow-GRPO.
func ObjectiveFor(rec *schema.Recipe) Objective {
	g, _ := BuildGraph(rec)
	if g == nil {
		return Objective{Name: "val accuracy", Key: "val/accuracy"}
	}
	for _, n := range g.Nodes {
		if !n.Role.Trainable {
			continue
		}
		p := n.Role.Name + "/"
		if n.Contract.TeacherReward {
			// It imitates the teacher's cost-to-go (the task reward of its
			// completions), not its distribution.
			return Objective{Name: "val accuracy", Key: "val/accuracy"}
		}
		if n.Role.InitString("teacher") != "" {
			return Objective{Name: "teacher KL", Key: "val/teacher_kl", Lower: true, WithAccuracy: true}
		}
		if obj := kindOf(n.Contract.Data).objective; obj != nil {
			return obj(p)
		}
		break
	}
	return Objective{Name: "val accuracy", Key: "val/accuracy"}
}

// Measure returns the objective's first and last values over records (metrics.jsonl
// records, in step order); ok is false when the key has no finite value.
func (o Objective) Measure(records []map[string]any) (first, last float64, ok bool) {
	var vs []float64
	for _, r := range records {
		if o.Window > 0 {
			if s, _ := r["step"].(float64); s <= 0 {
				continue // the evaluation before training has no training metrics
			}
		}
		if v, isNum := r[o.Key].(float64); isNum && !math.IsNaN(v) && !math.IsInf(v, 0) {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return 0, 0, false
	}
	if o.Window <= 0 {
		return vs[0], vs[len(vs)-1], true
	}
	w := min(o.Window, max(len(vs)/2, 1))
	mean := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	return mean(vs[:w]), mean(vs[len(vs)-w:]), true
}

// Span says how first and last were taken, e.g. "means of the first and last 10 steps".
func (o Objective) Span(records []map[string]any) string {
	if o.Window <= 0 {
		return "first and last evaluation"
	}
	n := 0
	for _, r := range records {
		if s, _ := r["step"].(float64); s > 0 {
			if _, ok := r[o.Key].(float64); ok {
				n++
			}
		}
	}
	w := min(o.Window, max(n/2, 1))
	if w == 1 {
		return "first and last step"
	}
	return fmt.Sprintf("means of the first and last %d steps", w)
}

// Format is "name first → last".
func (o Objective) Format(first, last float64) string {
	return fmt.Sprintf("%s %.3f → %.3f", o.Name, first, last)
}
