package model_test

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"computerd/agentctl/model"
)

func TestCost(t *testing.T) {
	million := model.Usage{InputTokens: 1_000_000, OutputTokens: 1_000_000}
	overrides := model.Prices{
		"my-local-model": {Input: 0, Output: 0},
		"gpt-4o":         {Input: 1, Output: 2},
		"qwen*-coder*":   {Input: 0.5, Output: 1},
	}
	tests := []struct {
		name      string
		model     string
		usage     model.Usage
		overrides model.Prices
		want      float64
		wantKnown bool
	}{
		{"exact", "gpt-4o", million, nil, 12.50, true},
		{"longest prefix", "gpt-4o-mini-2024-07-18", million, nil, 0.75, true},
		{"dated", "gpt-4.1-2025-04-14", million, nil, 10, true},
		{"dated mini", "gpt-4.1-mini-2025-04-14", million, nil, 2, true},
		{"o4-mini", "o4-mini", model.Usage{InputTokens: 2_000_000}, nil, 2.20, true},
		{"claude sonnet dated", "claude-sonnet-4-20250514", million, nil, 18, true},
		{"claude opus 4.1", "claude-opus-4-1-20250805", million, nil, 90, true},
		{"claude haiku 3.5", "claude-3-5-haiku-20241022", million, nil, 4.80, true},
		{"router prefix", "openai/gpt-4o", million, nil, 12.50, true},
		{"no boundary", "gpt-4oo", million, nil, 0, false},
		{"unknown", "llama3.1:8b", million, nil, 0, false},
		{"override wins", "gpt-4o-2024-08-06", million, overrides, 3, true},
		{"override new model", "my-local-model", million, overrides, 0, true},
		{"override pattern", "qwen2.5-coder-32b", million, overrides, 1.5, true},
		{"small", "gpt-4o-mini", model.Usage{InputTokens: 1000, OutputTokens: 500}, nil, 0.00045, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, known := model.Cost(tt.model, tt.usage, tt.overrides)
			if math.Abs(got-tt.want) > 1e-9 || known != tt.wantKnown {
				t.Errorf("Cost(%q) = %v, %v; want %v, %v", tt.model, got, known, tt.want, tt.wantKnown)
			}
		})
	}
}

func TestParsePrices(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    model.Prices
		wantErr bool
	}{
		{"empty", "", model.Prices{}, false},
		{"list", "gpt-4o=2.5/10, my-model=0/0", model.Prices{"gpt-4o": {2.5, 10}, "my-model": {0, 0}}, false},
		{"json", `{"my-model":{"input":0.5,"output":1.5}}`, model.Prices{"my-model": {0.5, 1.5}}, false},
		{"no slash", "gpt-4o=2.5", nil, true},
		{"no name", "=1/2", nil, true},
		{"not a number", "m=a/2", nil, true},
		{"negative", "m=-1/2", nil, true},
		{"bad json", `{"m":`, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := model.ParsePrices(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParsePrices(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParsePrices(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestLoadPrices(t *testing.T) {
	name := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(name, []byte(`{"claude-sonnet-4":{"input":1,"output":1}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := model.LoadPrices(name)
	if err != nil {
		t.Fatal(err)
	}
	got, known := model.Cost("claude-sonnet-4-5-20250929", model.Usage{InputTokens: 1_000_000}, p)
	// The list price of claude-sonnet-4-5 is more specific, but an override
	// is looked up first.
	if got != 1 || !known {
		t.Errorf("cost = %v, %v; want 1, true", got, known)
	}
	if _, err := model.LoadPrices(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("LoadPrices of a missing file: no error")
	}
}

func TestListPricesIsACopy(t *testing.T) {
	p := model.ListPrices()
	p["gpt-4o"] = model.Price{}
	if got, _ := model.Cost("gpt-4o", model.Usage{InputTokens: 1_000_000}, nil); got != 2.5 {
		t.Errorf("changing ListPrices changed the table: cost %v", got)
	}
}

func TestUsageAdd(t *testing.T) {
	u := model.Usage{InputTokens: 120, OutputTokens: 17}.Add(model.Usage{InputTokens: 80, OutputTokens: 3})
	if got, want := u, (model.Usage{InputTokens: 200, OutputTokens: 20}); got != want {
		t.Errorf("Add = %+v, want %+v", got, want)
	}
}
