// Command bench measures computerd's subsystems against fixed bars and
// against references measured in the same run, so a result means the same
// thing on a fast machine and a slow one.
//
// Usage:
//
//	go run ./bench -suite store -json
//
// Each suite is a set of metrics registered (from its own file) into the
// suites map; -suite takes a comma-separated list of names, or "all".
// Suites include "store" (package fsstore; see store.go for what each
// metric does and why) and "exec" (package computerd/sandbox; see
// exec.go); -h lists them all.
//
// Output is one result per metric. With -json, each is one JSON object per
// line:
//
//	{"name":"store/import_time","value":1.2,"unit":"s","ref":"sqlite_insert_s",
//	 "ref_value":0.8,"ratio":1.5,"target":"<=2","target_on":"ratio","pass":true,
//	 "note":"..."}
//
// value is the measurement; ref names a reference measured in the same run
// and ref_value is its measurement; ratio is value/ref_value (unless a
// metric's note says otherwise); target is the bar, applied to the field
// named by target_on ("value" or "ratio"); pass says whether the bar is met.
// A metric without a bar has an empty target and passes. A metric without a
// reference has an empty ref and zero ref_value and ratio. Without -json the
// results are printed as a table.
//
// Exit status: 0 if every bar is met, 1 if any bar fails (0 with -nofail),
// 2 on usage errors or if a suite cannot run.
//
// All data lives in a temporary directory under -dir, removed on exit
// (also on interrupt). A metric whose measurement runs longer than -timeout
// is abandoned and reported as failed, with value 0. -cpuprofile writes a CPU profile of the whole run;
// samples carry the pprof label "metric", so one metric can be examined with
// `go tool pprof -tagfocus metric=import ...`.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"computerd/computerd/daemon"
	"computerd/computerd/sandbox"
)

// Result is one measured metric.
type Result struct {
	Name     string  `json:"name"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	Ref      string  `json:"ref"`
	RefValue float64 `json:"ref_value"`
	Ratio    float64 `json:"ratio"`
	Target   string  `json:"target"`    // e.g. "<=2"; empty when the metric has no bar
	TargetOn string  `json:"target_on"` // "value" or "ratio"; empty when no bar
	Pass     bool    `json:"pass"`
	Note     string  `json:"note,omitempty"`
}

// Bar is a pass/fail threshold on a result field.
type Bar struct {
	On string  // "value" or "ratio"
	Op string  // "<", "<=", ">", ">="
	X  float64 // the threshold
}

// withRef fills in the reference and the ratio value/refValue.
func (r Result) withRef(ref string, refValue float64) Result {
	r.Ref, r.RefValue = ref, refValue
	if refValue != 0 {
		r.Ratio = r.Value / refValue
	}
	return r
}

// check applies bar (a zero Bar means no bar) and sets Target, TargetOn and Pass.
func (r Result) check(b Bar) Result {
	r.Pass = true
	if b.Op == "" {
		return r
	}
	r.Target, r.TargetOn = b.Op+strconv.FormatFloat(b.X, 'g', -1, 64), b.On
	v := r.Value
	if b.On == "ratio" {
		v = r.Ratio
	}
	switch b.Op {
	case "<":
		r.Pass = v < b.X
	case "<=":
		r.Pass = v <= b.X
	case ">":
		r.Pass = v > b.X
	case ">=":
		r.Pass = v >= b.X
	default:
		panic("bad bar op " + b.Op)
	}
	if math.IsNaN(v) {
		r.Pass = false
	}
	return r
}

// Env is what a suite runs with.
type Env struct {
	Src     string // source tree to import (a directory)
	Dir     string // this run's temporary directory; the suite may use it freely
	Verbose bool
	Timeout time.Duration // for each metric's measurement (see phase)
	// LoadDuration is how long the load suite's measured round runs.
	LoadDuration time.Duration
	// AttachEntries is how many entries the attach suite's archive holds.
	AttachEntries int
	emit          func(Result)
}

// Emit reports one result as soon as it is measured.
func (e *Env) Emit(r Result) { e.emit(r) }

// Logf prints progress to stderr with -v.
func (e *Env) Logf(format string, args ...any) {
	if e.Verbose {
		fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	}
}

// Suite is a named group of metrics.
type Suite struct {
	Name string
	Doc  string
	Run  func(ctx context.Context, env *Env) error
}

// suites holds every suite; each suite's file registers itself in init.
var suites = map[string]Suite{}

func register(s Suite) {
	if _, dup := suites[s.Name]; dup {
		panic("bench: duplicate suite " + s.Name)
	}
	suites[s.Name] = s
}

func suiteNames() []string {
	var names []string
	for n := range suites {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func main() {
	sandbox.Init() // a re-executed container init (exec suite) never returns
	// The store and daemon run here as in computerd serve: its GC settings.
	daemon.TuneRuntime()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("bench", flag.ContinueOnError)
	fl.SetOutput(stderr)
	suiteFlag := fl.String("suite", "store", "comma-separated suites to run, or all")
	jsonOut := fl.Bool("json", false, "print one JSON object per result line")
	src := fl.String("src", "", "source tree to import (default $(go env GOROOT)/src)")
	dir := fl.String("dir", os.TempDir(), "directory for temporary data")
	nofail := fl.Bool("nofail", false, "exit 0 even if a bar fails")
	cpuprofile := fl.String("cpuprofile", "", "write a CPU profile of the run to `file`")
	verbose := fl.Bool("v", false, "print progress to stderr")
	timeout := fl.Duration("timeout", 5*time.Minute, "give up on a metric that takes longer than this (it fails)")
	loadDuration := fl.Duration("load-duration", 60*time.Second, "how long the load suite's measured round runs")
	attachEntries := fl.Int("attach-entries", 1000000, "entries of the attach suite's archive")
	fl.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./bench [flags]\n\nsuites:\n")
		for _, n := range suiteNames() {
			fmt.Fprintf(stderr, "  %-8s %s\n", n, suites[n].Doc)
		}
		fmt.Fprintf(stderr, "\nflags:\n")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected arguments %q\n", fl.Args())
		return 2
	}

	var selected []Suite
	for _, n := range strings.Split(*suiteFlag, ",") {
		n = strings.TrimSpace(n)
		if n == "all" {
			selected = selected[:0]
			for _, m := range suiteNames() {
				selected = append(selected, suites[m])
			}
			break
		}
		s, ok := suites[n]
		if !ok {
			fmt.Fprintf(stderr, "bench: unknown suite %q (have %s)\n", n, strings.Join(suiteNames(), ", "))
			return 2
		}
		selected = append(selected, s)
	}

	if *src == "" {
		root, err := goroot(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "bench: %v; use -src\n", err)
			return 2
		}
		*src = root + string(os.PathSeparator) + "src"
	}
	if fi, err := os.Stat(*src); err != nil || !fi.IsDir() {
		fmt.Fprintf(stderr, "bench: -src %s: not a directory (%v)\n", *src, err)
		return 2
	}

	tmp, err := os.MkdirTemp(*dir, "computerd-bench-*")
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	defer os.RemoveAll(tmp)

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}

	var results []Result
	emit := func(r Result) {
		r.Value, r.RefValue, r.Ratio = round(r.Value), round(r.RefValue), round(r.Ratio)
		results = append(results, r)
		if *jsonOut {
			enc := json.NewEncoder(stdout)
			enc.SetEscapeHTML(false) // keep "<=2" readable
			if err := enc.Encode(r); err != nil {
				fmt.Fprintf(stderr, "bench: %v\n", err)
			}
		}
	}
	failedSuite := false
	for _, s := range selected {
		sdir := tmp + string(os.PathSeparator) + s.Name
		if err := os.Mkdir(sdir, 0o700); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 2
		}
		env := &Env{Src: *src, Dir: sdir, Verbose: *verbose, Timeout: *timeout, LoadDuration: *loadDuration, AttachEntries: *attachEntries, emit: emit}
		err := s.Run(ctx, env)
		// Free the suite's data before the next one runs.
		if rerr := os.RemoveAll(sdir); err == nil && rerr != nil {
			err = rerr
		}
		if err != nil {
			fmt.Fprintf(stderr, "bench: suite %s: %v\n", s.Name, err)
			failedSuite = true
			if ctx.Err() != nil {
				break
			}
		}
	}
	if !*jsonOut {
		printTable(stdout, results)
	}

	var failed []string
	for _, r := range results {
		if !r.Pass {
			failed = append(failed, r.Name)
		}
	}
	switch {
	case failedSuite:
		return 2
	case len(failed) > 0:
		fmt.Fprintf(stderr, "bench: %d of %d metrics failed: %s\n", len(failed), len(results), strings.Join(failed, ", "))
		if !*nofail {
			return 1
		}
	}
	return 0
}

// goroot finds the Go installation whose src tree is the default import
// source: `go env GOROOT`, else $GOROOT, else the one this binary was built by.
func goroot(ctx context.Context) (string, error) {
	if out, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output(); err == nil {
		if root := strings.TrimSpace(string(out)); root != "" {
			return root, nil
		}
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return root, nil
	}
	//lint:ignore SA1019 last resort when no go command is on PATH
	if root := runtime.GOROOT(); root != "" {
		return root, nil
	}
	return "", errors.New("cannot find GOROOT")
}

// round keeps 4 significant digits (more for large integers), for readable output.
func round(x float64) float64 {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	if math.Abs(x) >= 1e4 {
		return math.Round(x)
	}
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 4, 64), 64)
	return v
}

func printTable(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "METRIC\tVALUE\tUNIT\tREF\tREF VALUE\tRATIO\tBAR\tPASS\t")
	for _, r := range results {
		ref, refv, ratio := "-", "-", "-"
		if r.Ref != "" {
			ref, refv, ratio = r.Ref, fmtNum(r.RefValue), fmtNum(r.Ratio)
		}
		bar, pass := "-", "ok"
		if r.Target != "" {
			bar = r.TargetOn + r.Target
		}
		if !r.Pass {
			pass = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Name, fmtNum(r.Value), r.Unit, ref, refv, ratio, bar, pass)
	}
	tw.Flush()
	for _, r := range results {
		if r.Note != "" {
			fmt.Fprintf(w, "  %s: %s\n", r.Name, r.Note)
		}
	}
}

func fmtNum(x float64) string {
	if math.Abs(x) >= 1e4 && x == math.Trunc(x) && math.Abs(x) < 1e15 {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strconv.FormatFloat(x, 'g', -1, 64)
}
