package cli

import (
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// ctlArgs rewrites a ctl command line so that flags may come anywhere
// after "ctl", as people type them: ctl's own flags (--addr, --timeout,
// -o, the token's) given after a subcommand move in front of it, and a
// subcommand's flags given after its arguments move before them. The
// cli library takes flags only before the arguments of the command that
// defines them. Everything after "--" (a worker's command) is left as it
// is, and so is a token the command tree does not know (the library
// reports it). A subcommand that defines a flag of ctl's name (ctl token's
// --cluster-secret-file) keeps it.
func ctlArgs(app *ucli.App, args []string) []string {
	if len(args) < 2 || args[1] != "ctl" {
		return args
	}
	ctl := subcommand(app.Commands, "ctl")
	if ctl == nil {
		return args
	}
	// levels[0] is ctl with its flags; each further level a subcommand's
	// name and its flags.
	type level struct {
		cmd   *ucli.Command
		words []string
	}
	levels := []level{{cmd: ctl, words: []string{"ctl"}}}
	var hoisted, positional, tail []string
	rest := args[2:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			tail = rest[i:]
			break
		}
		cur := &levels[len(levels)-1]
		if name, inline, ok := flagToken(a); ok {
			words := []string{a}
			f := flagOf(cur.cmd, name)
			owner := cur
			if f == nil && len(levels) > 1 {
				if g := flagOf(ctl, name); g != nil {
					f, owner = g, nil
				}
			}
			if f != nil && takesValue(f) && !inline && i+1 < len(rest) {
				i++
				words = append(words, rest[i])
			}
			if owner == nil {
				hoisted = append(hoisted, words...)
			} else {
				owner.words = append(owner.words, words...)
			}
			continue
		}
		if len(positional) == 0 {
			if sub := subcommand(cur.cmd.Subcommands, a); sub != nil {
				levels = append(levels, level{cmd: sub, words: []string{a}})
				continue
			}
		}
		positional = append(positional, a)
	}
	out := append([]string{}, args[0])
	out = append(out, levels[0].words...)
	out = append(out, hoisted...)
	for _, l := range levels[1:] {
		out = append(out, l.words...)
	}
	out = append(out, positional...)
	return append(out, tail...)
}

// flagToken reports whether a is a flag ("-o", "--addr", "--addr=x"),
// its name, and whether its value is inline.
func flagToken(a string) (name string, inline, ok bool) {
	if len(a) < 2 || a[0] != '-' {
		return "", false, false
	}
	name = strings.TrimLeft(a, "-")
	if name == "" {
		return "", false, false
	}
	if n, _, found := strings.Cut(name, "="); found {
		return n, true, true
	}
	return name, false, true
}

func flagOf(cmd *ucli.Command, name string) ucli.Flag {
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

func subcommand(cmds []*ucli.Command, name string) *ucli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// takesValue reports whether f reads the next word as its value (a bool
// flag does not: --hint, or --hint=false).
func takesValue(f ucli.Flag) bool {
	_, isBool := f.(*ucli.BoolFlag)
	return !isBool
}
