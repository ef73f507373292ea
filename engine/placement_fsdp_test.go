package engine

import (
	"strings"
	"testing"

	"stx.dev/stx/schema"
)

func TestShardingProblems(t *testing.T) {
	role := func(trainable bool, devices []int, sharding string, offload bool) schema.Role {
		r := testRole("policy", "sft", trainable)
		r.Devices, r.Sharding, r.Offload = devices, sharding, offload
		return r
	}
	for _, tc := range []struct {
		name string
		role schema.Role
		want string // message substring; "" for none
	}{
		{"fsdp on two devices", role(true, []int{0, 1}, "fsdp", false), ""},
		{"replicate on one device", role(true, nil, "replicate", false), ""},
		{"default", role(false, []int{0, 1}, "", true), ""},
		{"fsdp on one device", role(true, []int{1}, "fsdp", false), "is on 1 device(s): fsdp shards along at least 2"},
		{"fsdp without devices", role(true, nil, "fsdp", false), "is on 1 device(s)"},
		{"fsdp frozen", role(false, []int{0, 1}, "fsdp", false), "is frozen"},
		{"fsdp offloaded", role(true, []int{0, 1}, "fsdp", true), "fsdp and offload cannot be combined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probs := shardingProblems(2, tc.role)
			switch {
			case tc.want == "" && len(probs) > 0:
				t.Errorf("problems %v, want none", probs)
			case tc.want != "" && (len(probs) != 1 || probs[0].Path != "roles[2].sharding" || !strings.Contains(probs[0].Msg, tc.want)):
				t.Errorf("problems %v, want one at roles[2].sharding containing %q", probs, tc.want)
			}
		})
	}
}
