package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"computerd/client"
	"computerd/core"
	"computerd/wire"
)

// Report is a run's account in Markdown, fit to paste as a pull request
// body: the model's last word, what changed (a diff stat between the
// revision the run began from and the last one it made) and every command
// it ran with its exit code and duration, all taken from the journal.
func Report(ctx context.Context, cl *client.Client, id string) (string, error) {
	detail, err := cl.Run(ctx, id)
	if err != nil {
		return "", err
	}
	r := detail.Run
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n\n", OneLine(r.Task, 0))
	if summary := lastAnswer(detail.Steps); summary != "" {
		fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(summary))
	}
	last := r.BaseRev
	for _, st := range detail.Steps {
		last = max(last, st.Rev)
	}
	b.WriteString("### Changes\n\n")
	if last == r.BaseRev {
		b.WriteString("No files changed.\n\n")
	} else {
		files, err := cl.DiffStat(ctx, r.WSName, r.BaseRev, last)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "Revisions %d..%d of `%s`:\n\n```\n", r.BaseRev, last, r.WSName)
		core.WriteStat(&b, files)
		b.WriteString("```\n\n")
	}
	b.WriteString("### Commands\n\n")
	cmds := 0
	for _, st := range detail.Steps {
		if st.Kind != core.StepTool || st.Tool != "exec" {
			continue
		}
		if cmds == 0 {
			b.WriteString("| command | exit | duration |\n|---|---|---|\n")
		}
		cmds++
		exit, dur := "(did not end)", ""
		if st.ExecID != "" {
			if rec, err := cl.ExecRecord(ctx, r.WSName, st.ExecID); err == nil {
				exit, dur = fmt.Sprint(rec.ExitCode), rec.Duration().Round(time.Millisecond).String()
				if rec.TimedOut {
					exit += " (timed out)"
				}
			}
		} else if st.IsError {
			exit = "error: " + st.Code
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", strings.ReplaceAll(commandOf(st), "|", "\\|"), exit, dur)
	}
	if cmds == 0 {
		b.WriteString("No commands were run.\n")
	}
	fmt.Fprintf(&b, "\n---\nRun `%s` (%s): %d steps, %d input + %d output tokens, $%.4f, %s %s.\n",
		r.ID, r.State, r.Steps, r.InputTokens, r.OutputTokens, r.Cost, r.Provider, r.Model)
	if r.Error != "" {
		fmt.Fprintf(&b, "Ended: %s\n", r.Error)
	}
	return b.String(), nil
}

// SkillFromRun writes a procedure from a finished run: its task and the
// commands that succeeded, in order, for a model to follow next time.
func SkillFromRun(detail wire.RunDetail) string {
	var b strings.Builder
	fmt.Fprintf(&b, "This procedure did the task %q before.\n", detail.Run.Task)
	n := 0
	for _, st := range detail.Steps {
		if st.Kind != core.StepTool || st.Tool != "exec" || st.ExitCode == nil || *st.ExitCode != 0 {
			continue
		}
		if n == 0 {
			b.WriteString("These commands succeeded, in this order; run them again, and adapt if the workspace changed:\n")
		}
		n++
		fmt.Fprintf(&b, "%d. %s\n", n, commandOf(st))
	}
	if summary := lastAnswer(detail.Steps); summary != "" {
		fmt.Fprintf(&b, "\nWhat the run concluded:\n%s\n", strings.TrimSpace(summary))
	}
	return b.String()
}

// lastAnswer is the text of the run's last model turn.
func lastAnswer(steps []core.Step) string {
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].Kind == core.StepModel && steps[i].State == core.StepDone && !steps[i].IsError {
			return steps[i].Text
		}
	}
	return ""
}

// commandOf is an exec step's command line.
func commandOf(st core.Step) string {
	var a struct{ Command string }
	if err := json.Unmarshal(st.Args, &a); err != nil || a.Command == "" {
		return string(st.Args)
	}
	return OneLine(a.Command, 0)
}

// OneLine shortens text to its first line and, if max > 0, to at most
// max runes, marking what it cut.
func OneLine(s string, max int) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if r := []rune(s); max > 0 && len(r) > max {
		s = string(r[:max]) + "…"
	}
	return s
}
