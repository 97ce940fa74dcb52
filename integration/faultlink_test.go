package integration

import (
	"math/rand/v2"
	"net"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// faultLink is a TCP proxy between an executor and its home that breaks
// chosen requests the way a flaky network does: it resets or closes a
// connection at a chosen byte of a request or of its answer, stalls a
// request's body, holds an answer back, trickles a request, or refuses
// every connection (the home out of reach). Each fault applies to the
// next requests whose request line matches it.
type faultLink struct {
	ln     net.Listener
	target string
	down   atomic.Bool   // refuse connections, and cut the ones open
	quit   chan struct{} // closed at the test's end: stalls end

	mu     sync.Mutex
	faults []*fault
	random *randomFaults
	conns  map[net.Conn]bool
	hits   map[faultKind]int // faults that happened, by kind
}

type faultKind int

const (
	resetRequest faultKind = iota // RST both ways once At bytes of the request went through
	closeRequest                  // FIN both ways once At bytes of the request went through
	finRequest                    // FIN to the home once At bytes of the request went through; its answer goes back
	stallRequest                  // stop passing the request on for Stall once At bytes went through
	trickle                       // pass the request on at Rate bytes a second
	cutAnswer                     // close both ways once At bytes of the answer went through
	holdAnswer                    // pass no byte of the answer on for Stall
)

func (k faultKind) String() string {
	return [...]string{"reset request", "close request", "fin request", "stall request", "trickle", "cut answer", "hold answer"}[k]
}

// fault is one way to break a request whose request line matches Match.
type fault struct {
	Match string // a regexp of the request line, e.g. `POST /v1/sync/\S+/push`
	Kind  faultKind
	At    int64 // bytes from the request line's (or the answer's) first byte
	Stall time.Duration
	Rate  int64
	Times int // requests to break (0: 1)
}

// randomFaults breaks a share of the requests matching match, each with a
// fault drawn at random.
type randomFaults struct {
	match *regexp.Regexp
	p     float64
	rnd   *rand.Rand
	stall time.Duration
}

var requestLine = regexp.MustCompile(`(GET|POST|PUT|DELETE|PATCH) /\S* HTTP/1\.1\r\n`)

func newFaultLink(t *testing.T, target string) *faultLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &faultLink{ln: ln, target: target, conns: map[net.Conn]bool{}, hits: map[faultKind]int{}, quit: make(chan struct{})}
	done := make(chan struct{})
	t.Cleanup(func() {
		close(l.quit)
		ln.Close()
		l.cutAll()
		<-done
	})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for {
			c, err := ln.Accept()
			if err != nil {
				wg.Wait()
				return
			}
			if l.down.Load() {
				c.Close()
				continue
			}
			wg.Add(1)
			go func() { defer wg.Done(); l.serve(c) }()
		}
	}()
	return l
}

// url is the link's address as a home URL.
func (l *faultLink) url() string { return "http://" + l.ln.Addr().String() }

// add queues faults for the next matching requests.
func (l *faultLink) add(fs ...fault) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range fs {
		if fs[i].Times == 0 {
			fs[i].Times = 1
		}
		l.faults = append(l.faults, &fs[i])
	}
}

// clear drops the queued faults (and random ones).
func (l *faultLink) clear() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults, l.random = nil, nil
}

// sleep waits d, or until the test ends.
func (l *faultLink) sleep(d time.Duration) {
	select {
	case <-time.After(d):
	case <-l.quit:
	}
}

// pending is how many queued faults have not happened yet.
func (l *faultLink) pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.faults)
}

// hitsNow is how many faults of each kind happened.
func (l *faultLink) hitsNow() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for k, n := range l.hits {
		out[k.String()] = n
	}
	return out
}

// hit is how many faults of kind happened.
func (l *faultLink) hit(kind faultKind) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hits[kind]
}

// setDown makes the home unreachable through the link (or reachable again).
func (l *faultLink) setDown(down bool) {
	l.down.Store(down)
	if down {
		l.cutAll()
	}
}

func (l *faultLink) cutAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		c.Close()
	}
}

// pick returns the fault for a request with line line, taking it off the queue.
func (l *faultLink) pick(line string) *fault {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, f := range l.faults {
		if regexp.MustCompile(f.Match).MatchString(line) {
			if f.Times--; f.Times <= 0 {
				l.faults = append(l.faults[:i], l.faults[i+1:]...)
			}
			return f
		}
	}
	if r := l.random; r != nil && r.match.MatchString(line) && r.rnd.Float64() < r.p {
		f := &fault{Kind: faultKind(r.rnd.IntN(int(holdAnswer) + 1)), Stall: r.stall, Rate: 64 << 10}
		switch f.Kind {
		case cutAnswer:
			f.At = r.rnd.Int64N(200)
		default:
			f.At = r.rnd.Int64N(400 << 10)
		}
		return f
	}
	return nil
}

func (l *faultLink) track(cs ...net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down.Load() {
		return false
	}
	for _, c := range cs {
		l.conns[c] = true
	}
	return true
}

func (l *faultLink) untrack(cs ...net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range cs {
		delete(l.conns, c)
	}
}

func (l *faultLink) happened(f *fault) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hits[f.Kind]++
}

// conn is one proxied connection: the fault of the request on it now.
type linkConn struct {
	l          *faultLink
	client, up net.Conn
	mu         sync.Mutex
	cur        *fault
	answered   int64 // bytes of the current answer passed on
	held       bool  // the current answer was held already
	finished   bool  // the home was sent a FIN: what the client sends goes nowhere
}

func (l *faultLink) serve(c net.Conn) {
	up, err := net.Dial("tcp", l.target)
	if err != nil {
		c.Close()
		return
	}
	if !l.track(c, up) {
		c.Close()
		up.Close()
		return
	}
	defer l.untrack(c, up)
	lc := &linkConn{l: l, client: c, up: up}
	done := make(chan struct{})
	go func() { defer close(done); lc.answers() }()
	lc.requests()
	<-done
}

// reset closes both connections with an RST.
func (lc *linkConn) reset() {
	for _, c := range []net.Conn{lc.client, lc.up} {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	}
}

func (lc *linkConn) close() {
	lc.client.Close()
	lc.up.Close()
}

// requests passes the client's bytes on, breaking a request as its
// fault says. A request begins at its request line (the executor writes
// a request's header in one piece, so one read holds a whole line).
func (lc *linkConn) requests() {
	defer lc.up.Close()
	buf := make([]byte, 16<<10)
	var f *fault
	var sent int64 // bytes of the current request passed on
	for {
		n, err := lc.client.Read(buf)
		data := buf[:n]
		for len(data) > 0 {
			if loc := requestLine.FindIndex(data); loc != nil && loc[0] == 0 {
				f = lc.l.pick(string(data[:loc[1]]))
				sent = 0
				lc.mu.Lock()
				lc.cur, lc.answered, lc.held = f, 0, false
				lc.mu.Unlock()
			}
			step := data
			if loc := requestLine.FindIndex(data[1:]); loc != nil {
				step = data[:loc[0]+1]
			}
			if !lc.pass(f, step, &sent) {
				return
			}
			data = data[len(step):]
		}
		if err != nil {
			return
		}
	}
}

// pass sends b (bytes of a request, sent of it gone before) on, or breaks
// the connection where f says; false once the connection is broken.
func (lc *linkConn) pass(f *fault, b []byte, sent *int64) bool {
	if lc.finished {
		return true
	}
	if f != nil && f.Kind == trickle {
		if *sent == 0 {
			lc.l.happened(f)
		}
		for len(b) > 0 {
			step := min(len(b), int(max(f.Rate/20, 1)))
			if _, err := lc.up.Write(b[:step]); err != nil {
				return false
			}
			*sent += int64(step)
			b = b[step:]
			time.Sleep(50 * time.Millisecond)
		}
		return true
	}
	if f != nil && (f.Kind == resetRequest || f.Kind == closeRequest || f.Kind == finRequest || f.Kind == stallRequest) && *sent+int64(len(b)) > f.At && *sent <= f.At {
		k := f.At - *sent
		if _, err := lc.up.Write(b[:k]); err != nil {
			return false
		}
		*sent += k
		b = b[k:]
		lc.l.happened(f)
		switch f.Kind {
		case resetRequest:
			lc.reset()
			return false
		case closeRequest:
			lc.close()
			return false
		case finRequest:
			lc.up.(*net.TCPConn).CloseWrite()
			lc.finished = true
			return true
		case stallRequest:
			lc.l.sleep(f.Stall)
			*sent++ // past At: the rest goes through
		}
	}
	if _, err := lc.up.Write(b); err != nil {
		return false
	}
	*sent += int64(len(b))
	return true
}

// answers passes the home's bytes back, breaking an answer as the
// current request's fault says.
func (lc *linkConn) answers() {
	defer lc.client.Close()
	buf := make([]byte, 16<<10)
	for {
		n, err := lc.up.Read(buf)
		b := buf[:n]
		if n > 0 {
			lc.mu.Lock()
			f, answered, held := lc.cur, lc.answered, lc.held
			lc.held = true
			lc.mu.Unlock()
			if f != nil && f.Kind == holdAnswer && !held {
				lc.l.happened(f)
				lc.l.sleep(f.Stall)
			}
			if f != nil && f.Kind == cutAnswer && answered+int64(n) > f.At {
				lc.client.Write(b[:f.At-answered])
				lc.l.happened(f)
				lc.close()
				return
			}
			if _, err := lc.client.Write(b); err != nil {
				lc.up.Close()
				return
			}
			lc.mu.Lock()
			lc.answered += int64(n)
			lc.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}
