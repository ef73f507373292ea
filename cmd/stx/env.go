package main

import (
	"os"

	"github.com/urfave/cli/v2"

	"stx.dev/stx/engine/workflow"
)

// envCommand serves the built-in workflow environments over stdin/stdout, so
// that a recipe's task.workflow.command ["stx", "env", "calculator"] runs
// this same binary. It is hidden: users name it in recipes, not at a shell.
func envCommand() *cli.Command {
	return &cli.Command{
		Name:      "env",
		Usage:     "serve a built-in workflow environment on stdin/stdout (JSON lines)",
		ArgsUsage: "NAME",
		Hidden:    true,
		Description: `env runs a built-in environment of task.workflow, speaking the JSON-lines
protocol of the engine/workflow package until stdin closes. Built-in: calculator.`,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("env takes one environment name (calculator), got %d arguments", c.NArg())
			}
			switch name := c.Args().First(); name {
			case "calculator":
				return workflow.ServeCalculator(os.Stdin, c.App.Writer)
			default:
				return usagef("unknown environment %q (built-in: calculator)", name)
			}
		},
	}
}
