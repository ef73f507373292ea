package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"stx.dev/stx/engine"
)

func graphCommand() *cli.Command {
	return &cli.Command{
		Name:      "graph",
		Usage:     "print a recipe's role graph (text, DOT or Mermaid)",
		ArgsUsage: "[FILES... | DIR]",
		Description: `graph shows the roles of one recipe as nodes, inject syncs as edges labelled
with their keys, the weight push of sync_to_rollout roles to the rollout
sampler, and pools as clusters.

Example:
   stx graph recipes.cue -a ppo --format dot | dot -Tpng -o ppo.png`,
		Flags: []cli.Flag{
			recipeFlag(true),
			&cli.StringFlag{Name: "format", Aliases: []string{"f"}, Value: "text", Usage: "text, dot or mermaid"},
			setFlag(),
		},
		Action: func(c *cli.Context) error {
			format := c.String("format")
			render, ok := map[string]func(io.Writer, *engine.Graph){"text": graphText, "dot": graphDOT, "mermaid": graphMermaid}[format]
			if !ok {
				return usagef("unknown --format %q: use text, dot or mermaid", format)
			}
			_, r, err := loadRecipe(c)
			if err != nil {
				return err
			}
			g, probs := engine.BuildGraph(r)
			if len(probs) > 0 { // engine.Load already reported these; defensive
				return fmt.Errorf("recipe %s: %s", r.Name, probs[0].Msg)
			}
			render(c.App.Writer, g)
			return nil
		},
	}
}

func syncLabel(keys, targetKeys []string) string {
	var parts []string
	for i, k := range keys {
		if i < len(targetKeys) && targetKeys[i] != k {
			parts = append(parts, k+" → "+targetKeys[i])
		} else {
			parts = append(parts, k)
		}
	}
	return strings.Join(parts, ", ")
}

func graphText(w io.Writer, g *engine.Graph) {
	r := g.Recipe
	fmt.Fprintf(w, "recipe %s: %s\n\nroles:\n", r.Name, r.Description)
	for _, n := range g.Nodes {
		state := "trainable"
		if !n.Role.Trainable {
			state = "frozen"
		}
		fmt.Fprintf(w, "  %-10s %-22s %-9s pool %-10s model %s\n", n.Role.Name, n.Role.Specialization, state, n.Role.Pool, modelString(n))
		fmt.Fprintf(w, "  %-10s requires %s; produces %s\n", "", strings.Join(n.Requires, ", "), strings.Join(n.Produces, ", "))
	}
	fmt.Fprintln(w, "\ninject syncs (in run order):")
	if len(g.Syncs) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, s := range g.Syncs {
		fmt.Fprintf(w, "  %s --[%s]--> %s\n", s.Source, syncLabel(s.Keys, s.TargetKeys), s.Target)
	}
	fmt.Fprintln(w, "\nrollout:")
	for _, n := range g.Nodes {
		if n.Role.SyncToRollout {
			fmt.Fprintf(w, "  %s ==[weights]==> rollout sampler\n", n.Role.Name)
		}
	}
	fmt.Fprintln(w, "\npools (roles in one pool run one after another):")
	for _, p := range g.Pools {
		fmt.Fprintf(w, "  %s: %s\n", p.Name, strings.Join(p.Roles, ", "))
	}
}

func modelString(n engine.Node) string {
	if n.Role.Model.InitFrom != "" {
		return "init_from " + n.Role.Model.InitFrom
	}
	return n.Role.Model.Source
}

func graphDOT(w io.Writer, g *engine.Graph) {
	fmt.Fprintf(w, "digraph %q {\n  rankdir=LR;\n  node [shape=box, style=rounded];\n", g.Recipe.Name)
	for _, p := range g.Pools {
		fmt.Fprintf(w, "  subgraph %q {\n    label=%q;\n    style=dashed;\n", "cluster_"+p.Name, "pool "+p.Name)
		for _, name := range p.Roles {
			n, _ := g.Node(name)
			label := n.Role.Name + "\\n" + n.Role.Specialization
			if !n.Role.Trainable {
				label += "\\n(frozen)"
			}
			fmt.Fprintf(w, "    %q [label=\"%s\"];\n", name, label)
		}
		fmt.Fprintln(w, "  }")
	}
	rollout := false
	for _, s := range g.Syncs {
		fmt.Fprintf(w, "  %q -> %q [label=%q];\n", s.Source, s.Target, syncLabel(s.Keys, s.TargetKeys))
	}
	for _, n := range g.Nodes {
		if n.Role.SyncToRollout {
			if !rollout {
				fmt.Fprintln(w, "  \"rollout\" [label=\"rollout sampler\", shape=cylinder];")
				rollout = true
			}
			fmt.Fprintf(w, "  %q -> \"rollout\" [label=\"weights\", style=bold];\n", n.Role.Name)
		}
	}
	fmt.Fprintln(w, "}")
}

func graphMermaid(w io.Writer, g *engine.Graph) {
	fmt.Fprintln(w, "flowchart LR")
	for _, p := range g.Pools {
		fmt.Fprintf(w, "  subgraph pool_%s[\"pool %s\"]\n", p.Name, p.Name)
		for _, name := range p.Roles {
			n, _ := g.Node(name)
			label := n.Role.Name + "<br/>" + n.Role.Specialization
			if !n.Role.Trainable {
				label += "<br/>(frozen)"
			}
			fmt.Fprintf(w, "    %s[\"%s\"]\n", name, label)
		}
		fmt.Fprintln(w, "  end")
	}
	for _, s := range g.Syncs {
		fmt.Fprintf(w, "  %s -- \"%s\" --> %s\n", s.Source, syncLabel(s.Keys, s.TargetKeys), s.Target)
	}
	for _, n := range g.Nodes {
		if n.Role.SyncToRollout {
			fmt.Fprintf(w, "  %s == weights ==> rollout[(\"rollout sampler\")]\n", n.Role.Name)
		}
	}
}
