package cluster

import (
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags Flags
		env   map[string]string
		want  Launch
		err   string
	}{
		{name: "one process by default", want: Launch{Nodes: 1}},
		{name: "flags", flags: Flags{Nodes: 2, NodesSet: true, Node: 1, NodeSet: true, Coordinator: "10.0.0.1:7070"},
			want: Launch{Nodes: 2, Node: 1, Coordinator: "10.0.0.1:7070", NodesFrom: "--nodes", NodeFrom: "--node-rank", CoordinatorFrom: "--coordinator"}},
		{name: "torchrun", env: map[string]string{"WORLD_SIZE": "4", "RANK": "3", "MASTER_ADDR": "head", "MASTER_PORT": "29500"},
			want: Launch{Nodes: 4, Node: 3, Coordinator: "head:29500", NodesFrom: "$WORLD_SIZE", NodeFrom: "$RANK", CoordinatorFrom: "$MASTER_ADDR:$MASTER_PORT"}},
		{name: "flags win over the environment", flags: Flags{Nodes: 2, NodesSet: true, Node: 0, NodeSet: true, Coordinator: "a:1"},
			env:  map[string]string{"WORLD_SIZE": "4", "RANK": "3", "MASTER_ADDR": "head", "MASTER_PORT": "29500"},
			want: Launch{Nodes: 2, Node: 0, Coordinator: "a:1", NodesFrom: "--nodes", NodeFrom: "--node-rank", CoordinatorFrom: "--coordinator"}},
		{name: "stx's variables win over the launchers'", env: map[string]string{"STX_NODES": "3", "STX_NODE_RANK": "2", "STX_COORDINATOR": "c:9", "WORLD_SIZE": "8", "RANK": "7"},
			want: Launch{Nodes: 3, Node: 2, Coordinator: "c:9", NodesFrom: "$STX_NODES", NodeFrom: "$STX_NODE_RANK", CoordinatorFrom: "$STX_COORDINATOR"}},
		{name: "SLURM with a coordinator", flags: Flags{Coordinator: "n01:7070"}, env: map[string]string{"SLURM_NTASKS": "2", "SLURM_PROCID": "1"},
			want: Launch{Nodes: 2, Node: 1, Coordinator: "n01:7070", NodesFrom: "$SLURM_NTASKS", NodeFrom: "$SLURM_PROCID", CoordinatorFrom: "--coordinator"}},
		{name: "SLURM without a coordinator is one process", env: map[string]string{"SLURM_NTASKS": "4", "SLURM_PROCID": "0"}, want: Launch{Nodes: 1}},
		{name: "Kubernetes JobSet", env: map[string]string{"STX_NODES": "2", "JOB_COMPLETION_INDEX": "1", "STX_COORDINATOR": "js-workers-0-0.js:7070"},
			want: Launch{Nodes: 2, Node: 1, Coordinator: "js-workers-0-0.js:7070", NodesFrom: "$STX_NODES", NodeFrom: "$JOB_COMPLETION_INDEX", CoordinatorFrom: "$STX_COORDINATOR"}},
		{name: "torchrun's single process", env: map[string]string{"WORLD_SIZE": "1", "RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
			want: Launch{Nodes: 1, NodesFrom: "$WORLD_SIZE", NodeFrom: "$RANK"}},
		{name: "rank outside", flags: Flags{Nodes: 2, NodesSet: true, Coordinator: "h:1"}, env: map[string]string{"RANK": "2"},
			err: "node rank 2 (from $RANK) is outside the 2 node(s) (from --nodes): ranks run from 0 to 1"},
		{name: "rank without nodes", flags: Flags{Node: 1, NodeSet: true},
			err: "node rank 1 (from --node-rank) is outside the 1 node(s) (the default)"},
		{name: "negative rank", flags: Flags{Nodes: 2, NodesSet: true, Node: -1, NodeSet: true, Coordinator: "h:1"}, err: "node rank -1"},
		{name: "no nodes", flags: Flags{Nodes: 0, NodesSet: true}, err: "--nodes = 0: the number of nodes must be at least 1"},
		{name: "no coordinator", flags: Flags{Nodes: 2, NodesSet: true}, err: "2 nodes (from --nodes) need a coordinator"},
		{name: "coordinator for one node", flags: Flags{Coordinator: "h:1"}, err: "--coordinator h:1 is for a run on several nodes"},
		{name: "no port", flags: Flags{Nodes: 2, NodesSet: true, Coordinator: "h"}, err: `coordinator "h" (--coordinator): want host:port`},
		{name: "bad port", flags: Flags{Nodes: 2, NodesSet: true, Coordinator: "h:99999"}, err: "a port from 1 to 65535"},
		{name: "MASTER_ADDR alone", env: map[string]string{"MASTER_ADDR": "h", "WORLD_SIZE": "2"}, err: `$MASTER_ADDR="h" and $MASTER_PORT="": set both`},
		{name: "not a number", env: map[string]string{"WORLD_SIZE": "two"}, err: `$WORLD_SIZE="two": want an integer`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(tc.flags, func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
