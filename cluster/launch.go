package cluster

import (
	"fmt"
	"net"
	"strconv"
)

// Launch is how this process takes part in a run: node Node of Nodes, meeting the others at
// the coordinator (node 0's address). Each value records where it came from, for messages.
type Launch struct {
	Nodes, Node                          int
	Coordinator                          string
	NodesFrom, NodeFrom, CoordinatorFrom string
}

// Multi says whether the run spans several processes.
func (l Launch) Multi() bool { return l.Nodes > 1 }

// Flags are the command line's values (--nodes, --node-rank, --coordinator); the *Set fields
// say which were given.
type Flags struct {
	Nodes, Node       int
	NodesSet, NodeSet bool
	Coordinator       string
}

// source is one place a value may come from: a flag or an environment variable.
type source struct {
	name  string // "--nodes", "$WORLD_SIZE"
	value string
}

// Resolve combines the flags with the variables launchers set; a flag wins over every
// variable, stx's own variables over the launchers'. In order:
//
//	nodes:       --nodes, $STX_NODES, $WORLD_SIZE (torchrun), $SLURM_NTASKS (with a coordinator)
//	node rank:   --node-rank, $STX_NODE_RANK, $RANK (torchrun), $SLURM_PROCID (with a
//	             coordinator), $JOB_COMPLETION_INDEX (an indexed Kubernetes Job, as a JobSet runs)
//	coordinator: --coordinator, $STX_COORDINATOR, $MASTER_ADDR:$MASTER_PORT (torchrun)
//
// SLURM's variables count only when a coordinator is given: every job step of an allocation
// sets them, also a batch script's single process, which must not wait for nodes that will
// never come. Without any of these the run is one process.
func Resolve(f Flags, getenv func(string) string) (Launch, error) {
	var l Launch
	coord, err := coordinatorSource(f, getenv)
	if err != nil {
		return l, err
	}
	l.Coordinator, l.CoordinatorFrom = coord.value, coord.name
	nodeSources := []source{{"$STX_NODES", getenv("STX_NODES")}, {"$WORLD_SIZE", getenv("WORLD_SIZE")}}
	rankSources := []source{{"$STX_NODE_RANK", getenv("STX_NODE_RANK")}, {"$RANK", getenv("RANK")}}
	if coord.value != "" {
		nodeSources = append(nodeSources, source{"$SLURM_NTASKS", getenv("SLURM_NTASKS")})
		rankSources = append(rankSources, source{"$SLURM_PROCID", getenv("SLURM_PROCID")})
	}
	rankSources = append(rankSources, source{"$JOB_COMPLETION_INDEX", getenv("JOB_COMPLETION_INDEX")})
	if l.Nodes, l.NodesFrom, err = pick(f.NodesSet, f.Nodes, "--nodes", nodeSources, 1); err != nil {
		return l, err
	}
	if l.Node, l.NodeFrom, err = pick(f.NodeSet, f.Node, "--node-rank", rankSources, 0); err != nil {
		return l, err
	}
	switch {
	case l.Nodes < 1:
		return l, fmt.Errorf("%s = %d: the number of nodes must be at least 1", l.NodesFrom, l.Nodes)
	case l.Node < 0 || l.Node >= l.Nodes:
		return l, fmt.Errorf("node rank %d (%s) is outside the %d node(s) (%s): ranks run from 0 to %d",
			l.Node, from(l.NodeFrom), l.Nodes, from(l.NodesFrom), l.Nodes-1)
	case l.Nodes > 1 && l.Coordinator == "":
		return l, fmt.Errorf("%d nodes (%s) need a coordinator: --coordinator host:port (node 0's address), or $MASTER_ADDR and $MASTER_PORT",
			l.Nodes, from(l.NodesFrom))
	case l.Nodes == 1 && f.Coordinator != "":
		return l, fmt.Errorf("--coordinator %s is for a run on several nodes: give --nodes N (N > 1) too", f.Coordinator)
	}
	if l.Nodes == 1 {
		l.Coordinator, l.CoordinatorFrom = "", ""
	}
	return l, nil
}

func from(name string) string {
	if name == "" {
		return "the default"
	}
	return "from " + name
}

// coordinatorSource finds the coordinator's address and checks that it is host:port.
func coordinatorSource(f Flags, getenv func(string) string) (source, error) {
	var s source
	switch addr, port := getenv("MASTER_ADDR"), getenv("MASTER_PORT"); {
	case f.Coordinator != "":
		s = source{"--coordinator", f.Coordinator}
	case getenv("STX_COORDINATOR") != "":
		s = source{"$STX_COORDINATOR", getenv("STX_COORDINATOR")}
	case addr != "" && port != "":
		s = source{"$MASTER_ADDR:$MASTER_PORT", net.JoinHostPort(addr, port)}
	case addr != "" || port != "":
		return s, fmt.Errorf("$MASTER_ADDR=%q and $MASTER_PORT=%q: set both (node 0's host and a free port) or neither", addr, port)
	default:
		return s, nil
	}
	host, port, err := net.SplitHostPort(s.value)
	if err != nil {
		return s, fmt.Errorf("coordinator %q (%s): want host:port: %w", s.value, s.name, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || host == "" {
		return s, fmt.Errorf("coordinator %q (%s): want host:port with a host and a port from 1 to 65535", s.value, s.name)
	}
	return s, nil
}

// pick returns the flag's value when it was given, else the first set variable's, else def.
func pick(set bool, flag int, flagName string, env []source, def int) (int, string, error) {
	if set {
		return flag, flagName, nil
	}
	for _, s := range env {
		if s.value == "" {
			continue
		}
		n, err := strconv.Atoi(s.value)
		if err != nil {
			return 0, "", fmt.Errorf("%s=%q: want an integer", s.name, s.value)
		}
		return n, s.name, nil
	}
	return def, "", nil
}
