package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"computerd/core"
	"computerd/wire"
)

// runPath is the URL path of run id, then rest; an id that is not one
// path segment is refused (wire.PathSegment), before any request.
func runPath(id string, rest ...string) (string, error) {
	seg, err := wire.PathSegment("run id", id)
	if err != nil {
		return "", err
	}
	return "/v1/runs/" + seg + strings.Join(rest, ""), nil
}

// skillPath is the URL path of skill name.
func skillPath(name string) (string, error) {
	seg, err := wire.PathSegment("skill name", name)
	if err != nil {
		return "", err
	}
	return "/v1/skills/" + seg, nil
}

// CreateRun records a new agent run on workspace ws, driven by req.Driver.
func (c *Client) CreateRun(ctx context.Context, ws string, req wire.CreateRun) (core.Run, error) {
	var out core.Run
	p, err := wsPath(ws, "/runs")
	if err != nil {
		return out, err
	}
	return out, c.Call(ctx, "POST", p, nil, req, &out)
}

// Runs lists a workspace's runs, newest first.
func (c *Client) Runs(ctx context.Context, ws string, limit int) ([]core.Run, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	p, err := wsPath(ws, "/runs")
	if err != nil {
		return nil, err
	}
	var out []core.Run
	return out, c.Call(ctx, "GET", p, q, nil, &out)
}

// Run returns a run and its steps.
func (c *Client) Run(ctx context.Context, id string) (wire.RunDetail, error) {
	var out wire.RunDetail
	p, err := runPath(id)
	if err != nil {
		return out, err
	}
	return out, c.Call(ctx, "GET", p, nil, nil, &out)
}

// ClaimRun makes driver the run's driver (a resume).
func (c *Client) ClaimRun(ctx context.Context, id, driver string) (core.Run, error) {
	return c.ClaimRunWith(ctx, id, wire.ClaimRun{Driver: driver})
}

// ClaimRunWith makes req.Driver the run's driver (a resume), on its
// lease, with the model it names where it names one.
func (c *Client) ClaimRunWith(ctx context.Context, id string, req wire.ClaimRun) (core.Run, error) {
	var out core.Run
	p, err := runPath(id, "/claim")
	if err != nil {
		return out, err
	}
	return out, c.Call(ctx, "POST", p, nil, req, &out)
}

// RenewRun renews driver's lease on the run.
func (c *Client) RenewRun(ctx context.Context, id, driver string) (core.Run, error) {
	var out core.Run
	p, err := runPath(id, "/renew")
	if err != nil {
		return out, err
	}
	return out, c.Call(ctx, "POST", p, nil, wire.RenewRun{Driver: driver}, &out)
}

// BeginStep records that step st begins; if it was recorded already, the
// recorded step comes back.
func (c *Client) BeginStep(ctx context.Context, driver string, st core.Step) (core.Step, error) {
	var out core.Step
	p, err := runPath(st.Run, "/steps")
	if err != nil {
		return out, err
	}
	return out, c.Call(ctx, "POST", p, nil, wire.StepRecord{Driver: driver, Step: st}, &out)
}

// EndStep records step st's result.
func (c *Client) EndStep(ctx context.Context, driver string, st core.Step) (core.Step, error) {
	var out core.Step
	p, err := runPath(st.Run, "/steps/", strconv.Itoa(st.Seq))
	if err != nil {
		return out, err
	}
	return out, c.Call(ctx, "PUT", p, nil, wire.StepRecord{Driver: driver, Step: st}, &out)
}

// EndRun records that the run ended in state.
func (c *Client) EndRun(ctx context.Context, id, driver string, state core.RunState, msg string) (core.Run, error) {
	var out core.Run
	p, err := runPath(id, "/end")
	if err != nil {
		return out, err
	}
	return out, c.Call(ctx, "POST", p, nil, wire.EndRun{Driver: driver, State: state, Error: msg}, &out)
}

// CancelRun asks a run to stop.
func (c *Client) CancelRun(ctx context.Context, id string) (core.Run, error) {
	var out core.Run
	p, err := runPath(id, "/cancel")
	if err != nil {
		return out, err
	}
	return out, c.Call(ctx, "POST", p, nil, nil, &out)
}

// FollowRun calls fn with each of run id's steps after seq after, as each
// begins and again as it ends, in order; with follow it returns when the
// run has ended, otherwise once the recorded steps are sent.
func (c *Client) FollowRun(ctx context.Context, id string, after int, follow bool, fn func(core.Step) error) error {
	q := url.Values{"after": {strconv.Itoa(after)}}
	if follow {
		q.Set("follow", "1")
	}
	p, err := runPath(id, "/steps")
	if err != nil {
		return err
	}
	resp, err := c.Do(ctx, wire.Request{Method: "GET", Path: p, Query: q})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		var st core.Step
		if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
			return fmt.Errorf("run steps: bad line: %w", err)
		}
		if err := fn(st); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("run steps: stream cut: %w", err)
	}
	return nil
}

// Memories lists the tenant's facts.
func (c *Client) Memories(ctx context.Context) ([]core.Memory, error) {
	var out []core.Memory
	return out, c.Call(ctx, "GET", "/v1/memories", nil, nil, &out)
}

// AddMemory keeps a fact for every new run.
func (c *Client) AddMemory(ctx context.Context, text string) (core.Memory, error) {
	var out core.Memory
	return out, c.Call(ctx, "POST", "/v1/memories", nil, wire.AddMemory{Text: text}, &out)
}

// DeleteMemory forgets a fact.
func (c *Client) DeleteMemory(ctx context.Context, id int64) error {
	return c.Call(ctx, "DELETE", "/v1/memories/"+strconv.FormatInt(id, 10), nil, nil, nil)
}

// Skills lists the tenant's skills (without bodies).
func (c *Client) Skills(ctx context.Context) ([]core.Skill, error) {
	var out []core.Skill
	return out, c.Call(ctx, "GET", "/v1/skills", nil, nil, &out)
}

// Skill returns one skill.
func (c *Client) Skill(ctx context.Context, name string) (core.Skill, error) {
	var out core.Skill
	p, err := skillPath(name)
	if err != nil {
		return out, err
	}
	return out, c.Call(ctx, "GET", p, nil, nil, &out)
}

// SaveSkill keeps (or replaces) a skill.
func (c *Client) SaveSkill(ctx context.Context, sk core.Skill) (core.Skill, error) {
	var out core.Skill
	p, err := skillPath(sk.Name)
	if err != nil {
		return out, err
	}
	return out, c.Call(ctx, "PUT", p, nil, sk, &out)
}

// DeleteSkill removes a skill.
func (c *Client) DeleteSkill(ctx context.Context, name string) error {
	p, err := skillPath(name)
	if err != nil {
		return err
	}
	return c.Call(ctx, "DELETE", p, nil, nil, nil)
}
