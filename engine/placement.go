package engine

import (
	"fmt"
	"slices"
	"strconv"

	"stx.dev/stx/runtime"
	"stx.dev/stx/schema"
	"stx.dev/stx/specializations"
)

// Role placement: a role's devices (schema: roles[i].devices) say where its weights live and
// its steps run. A trainable role on several devices trains data-parallel (runtime's
// Trainer.SetDevices; with sharding "fsdp", Trainer.SetFSDP shards its parameters and optimizer
// state among them) and runs its forward-only passes (producers) on its first device; a
// frozen role on several devices splits its forward passes' rows among them.

// placementProblems are the placement checks that need no backend: distinct devices, device
// 0 for a velocity-model role, rollout_device on the role the sampler uses.
func placementProblems(r *schema.Recipe, g *Graph) []Problem {
	var probs []Problem
	for i, role := range r.Roles {
		devs := role.Devices
		path := fmt.Sprintf("roles[%d].devices", i)
		for j, d := range devs {
			if k := slices.Index(devs, d); k < j {
				probs = append(probs, Problem{Path: fmt.Sprintf("%s[%d]", path, j),
					Msg: fmt.Sprintf("device %d is listed twice (also at devices[%d])", d, k)})
			}
		}
		probs = append(probs, shardingProblems(i, role)...)
		if isVelocityRole(g, role.Name) && (len(devs) > 1 || len(devs) == 1 && devs[0] != 0) {
			probs = append(probs, Problem{Path: path, Msg: fmt.Sprintf(
				"role %q (specialization %s) is a velocity model, which runs on device 0 only", role.Name, role.Specialization)})
			continue
		}
		if role.RolloutDevice != nil && i != rolloutRole(r) {
			probs = append(probs, Problem{Path: fmt.Sprintf("roles[%d].rollout_device", i), Msg: fmt.Sprintf(
				"role %q does not feed the rollout sampler (role %q does: the sync_to_rollout role, else the first trainable one)",
				role.Name, r.Roles[max(rolloutRole(r), 0)].Name)})
		} else if role.RolloutDevice != nil && isVelocityRole(g, role.Name) {
			probs = append(probs, Problem{Path: fmt.Sprintf("roles[%d].rollout_device", i), Msg: fmt.Sprintf(
				"role %q (specialization %s) is a velocity model, whose sampler runs on device 0 only", role.Name, role.Specialization)})
		}
		if role.Offload && isVelocityRole(g, role.Name) {
			probs = append(probs, Problem{Path: fmt.Sprintf("roles[%d].offload", i), Msg: fmt.Sprintf(
				"role %q (specialization %s) is a velocity model, which stx does not offload", role.Name, role.Specialization)})
		}
	}
	return probs
}

// shardingProblems checks a role's sharding: fsdp shards a trainable role's parameters and
// optimizer state along at least two devices, and stx does not offload sharded state.
func shardingProblems(i int, role schema.Role) []Problem {
	if role.Sharding != "fsdp" {
		return nil
	}
	path := fmt.Sprintf("roles[%d].sharding", i)
	switch {
	case !role.Trainable:
		return []Problem{{Path: path, Msg: fmt.Sprintf(
			"role %q is frozen: fsdp shards a trainable role's parameters and optimizer state (a frozen role on several devices splits its rows)", role.Name)}}
	case len(role.Devices) < 2:
		return []Problem{{Path: path, Msg: fmt.Sprintf(
			"role %q is on %d device(s): fsdp shards along at least 2 (set devices: [0, 1, ...])", role.Name, max(1, len(role.Devices)))}}
	case role.Offload:
		return []Problem{{Path: path, Msg: fmt.Sprintf(
			"role %q: fsdp and offload cannot be combined: stx does not offload sharded state", role.Name)}}
	}
	return nil
}

// rolloutRole is the index of the role whose weights the rollout sampler uses: the first
// sync_to_rollout role, else the first trainable one (-1: none).
func rolloutRole(r *schema.Recipe) int {
	if i := slices.IndexFunc(r.Roles, func(x schema.Role) bool { return x.SyncToRollout }); i >= 0 {
		return i
	}
	return slices.IndexFunc(r.Roles, func(x schema.Role) bool { return x.Trainable })
}

func isVelocityRole(g *Graph, name string) bool {
	for _, n := range g.Nodes {
		if n.Role.Name == name {
			return kindOf(n.Contract.Data).velocity
		}
	}
	return false
}

// Placed reports whether any recipe of cat places a role on devices, so that a command knows
// whether it needs a backend's device count to check them.
func Placed(cat *schema.Catalog) bool {
	for _, name := range cat.Names {
		if r := cat.Recipes[name]; r != nil {
			for _, role := range r.Roles {
				if len(role.Devices) > 0 || role.RolloutDevice != nil {
					return true
				}
			}
		}
	}
	return false
}

// CheckPlacement reports every role of cat's valid recipes placed on a device the backend
// does not have (numDevices of them), at the device's position in the user's file.
func CheckPlacement(cat *schema.Catalog, numDevices int) error {
	var errs schema.List
	for _, name := range cat.Names {
		r := cat.Recipes[name]
		if r == nil {
			continue
		}
		for i, role := range r.Roles {
			check := func(path, what string, d int) {
				if d >= numDevices {
					errs = append(errs, cat.Err(name, path, "%s %d, but the backend has %d device(s) (0–%d)", what, d, numDevices, numDevices-1))
				}
			}
			for j, d := range role.Devices {
				check(fmt.Sprintf("roles[%d].devices[%d]", i, j), fmt.Sprintf("role %q is placed on device", role.Name), d)
			}
			if role.RolloutDevice != nil {
				check(fmt.Sprintf("roles[%d].rollout_device", i), fmt.Sprintf("role %q samples rollouts on device", role.Name), *role.RolloutDevice)
			}
		}
	}
	if len(errs) > 0 {
		return errs.Sort()
	}
	return nil
}

// placeRole puts a built role's trainer and producers on the role's devices.
func placeRole(b *runtime.Backend, r *role) error {
	devs := r.node.Role.Devices
	if len(devs) == 0 {
		return nil
	}
	name := r.node.Role.Name
	if r.trainer != nil {
		place := r.trainer.SetDevices
		if r.node.Role.Sharding == "fsdp" {
			place = r.trainer.SetFSDP // parameters and optimizer state sharded (runtime/fsdp.go)
		}
		if err := place(b, devs); err != nil {
			return fmt.Errorf("role %q: %w", name, err)
		}
	}
	fwd := devs
	if r.trainer != nil {
		// The trainer's SPMD graphs fix the variables' sharding to its own mesh; forward
		// passes over the same variables stay on one device.
		fwd = devs[:1]
	}
	for _, p := range []*specializations.Producer{r.self, r.ref} {
		if p == nil {
			continue
		}
		if err := p.SetDevices(b, fwd); err != nil {
			return fmt.Errorf("role %q: %w", name, err)
		}
	}
	return nil
}

// rolloutSampler is the sampler of the rollout role r: reading r's own weights, or a copy of
// them on the role's rollout_device, which updateWeights refreshes.
func (l *loop) rolloutSampler(r *role) (*runtime.Sampler, error) {
	d := r.node.Role.RolloutDevice
	if d == nil {
		s, err := runtime.NewSampler(l.backend, r.model)
		if err == nil && len(r.node.Role.Devices) > 0 {
			err = s.SetDevice(l.backend, r.node.Role.Devices[0])
		}
		return s, err
	}
	push, err := runtime.NewRolloutCopy(l.backend, r.model, *d)
	if err != nil {
		return nil, fmt.Errorf("role %q: %w", r.name(), err)
	}
	s, err := runtime.NewSampler(l.backend, push.Model())
	if err != nil {
		return nil, err
	}
	if err := s.SetDevice(l.backend, *d); err != nil {
		return nil, err
	}
	l.push = push
	return s, nil
}

// updateWeights pushes the trained weights of the rollout role to the sampler's copy when
// the sampler has one (rollout_device); otherwise the sampler reads the role's variables at
// every Generate call and there is nothing to copy. An external rollout engine's servers
// load them here (rollout_remote.go, docs/multinode.md).
//
// It then offloads the roles marked offload: their weights and optimizer state go to host
// memory until their next use moves them back to their device.
func (l *loop) updateWeights() error {
	if err := l.syncRemote(); err != nil { // a rollout engine's servers (rollout_remote.go)
		return err
	}
	if l.push != nil {
		x, err := l.push.Push()
		if err != nil {
			return err
		}
		l.con.event("update_weights", map[string]any{"bytes": x.Bytes, "tensors": x.Tensors, "seconds": x.Duration.Seconds()})
	}
	if err := l.reportDeviceMemory(); err != nil {
		return err
	}
	for _, r := range l.roles {
		if !r.node.Role.Offload || r.model == nil {
			continue
		}
		x, err := r.model.Offload()
		if err != nil {
			return fmt.Errorf("role %q: %w", r.name(), err)
		}
		l.con.event("offload", map[string]any{"role": r.name(), "bytes": x.Bytes, "tensors": x.Tensors, "seconds": x.Duration.Seconds()})
	}
	return nil
}

// reportDeviceMemory reports, with --json, how many bytes of weights and optimizer state each
// device of a trainable role on several devices holds after the rollout's training
// ({"kind":"device_memory","role":…,"sharding":…,"bytes":{"0":…,…}}): all of them on every
// device when replicated, 1/N under fsdp. Roles that have not trained yet, and offloaded ones
// (back on the host), are left out.
func (l *loop) reportDeviceMemory() error {
	if !l.con.json {
		return nil
	}
	for _, r := range l.roles {
		if r.trainer == nil || r.trainer.Devices() < 2 || r.node.Role.Offload || r.trainer.StepCount() == 0 {
			continue
		}
		bytes, err := r.trainer.DeviceStateBytes()
		if err != nil {
			return fmt.Errorf("role %q: device memory: %w", r.name(), err)
		}
		per := map[string]any{}
		for d, b := range bytes {
			per[strconv.Itoa(d)] = b
		}
		l.con.event("device_memory", map[string]any{"role": r.name(), "sharding": r.trainer.Sharding(), "bytes": per})
	}
	return nil
}
