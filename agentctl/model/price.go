package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
)

// Price is what a model costs, in US dollars per million tokens.
type Price struct {
	Input  float64 `json:"input"`
	Output float64 `json:"output"`
}

// Prices maps a model name to its price. A name matches exactly, or as a
// prefix up to a dash (claude-sonnet-4 matches claude-sonnet-4-20250514;
// the longest such name wins), or as a path.Match pattern if it holds *.
type Prices map[string]Price

// PricesDate is when the list prices below were read off the providers'
// price pages. They change; override them with ParsePrices.
const PricesDate = "2025-11-01"

// listPrices are list prices as of PricesDate, without batch or cache discounts.
var listPrices = Prices{
	"gpt-4o":            {2.50, 10.00},
	"gpt-4o-mini":       {0.15, 0.60},
	"gpt-4.1":           {2.00, 8.00},
	"gpt-4.1-mini":      {0.40, 1.60},
	"gpt-4.1-nano":      {0.10, 0.40},
	"gpt-5":             {1.25, 10.00},
	"gpt-5-mini":        {0.25, 2.00},
	"gpt-5-nano":        {0.05, 0.40},
	"o1":                {15.00, 60.00},
	"o3":                {2.00, 8.00},
	"o3-mini":           {1.10, 4.40},
	"o4-mini":           {1.10, 4.40},
	"claude-opus-4":     {15.00, 75.00},
	"claude-opus-4-1":   {15.00, 75.00},
	"claude-opus-4-5":   {5.00, 25.00},
	"claude-sonnet-4":   {3.00, 15.00},
	"claude-sonnet-4-5": {3.00, 15.00},
	"claude-haiku-4-5":  {1.00, 5.00},
	"claude-3-7-sonnet": {3.00, 15.00},
	"claude-3-5-sonnet": {3.00, 15.00},
	"claude-3-5-haiku":  {0.80, 4.00},
	"claude-3-opus":     {15.00, 75.00},
	"claude-3-haiku":    {0.25, 1.25},
}

// ListPrices returns a copy of the built-in table of list prices (as of PricesDate).
func ListPrices() Prices {
	p := make(Prices, len(listPrices))
	for k, v := range listPrices {
		p[k] = v
	}
	return p
}

// Lookup finds the price of model in p.
func (p Prices) Lookup(model string) (Price, bool) {
	// A router's provider prefix (openai/gpt-4o) names the same model.
	if i := strings.LastIndexByte(model, '/'); i >= 0 {
		model = model[i+1:]
	}
	if pr, ok := p[model]; ok {
		return pr, true
	}
	// The longest prefix wins (gpt-4.1-mini over gpt-4.1); a pattern
	// counts only when no prefix matches.
	var prefix, pattern string
	for name := range p {
		switch {
		case strings.Contains(name, "*"):
			if ok, _ := path.Match(name, model); ok && len(name) > len(pattern) {
				pattern = name
			}
		case strings.HasPrefix(model, name+"-") && len(name) > len(prefix):
			prefix = name
		}
	}
	if prefix != "" {
		return p[prefix], true
	}
	if pattern != "" {
		return p[pattern], true
	}
	return Price{}, false
}

// Cost is what u cost on model in US dollars, looking in overrides first
// and then in the list prices. known is false when neither has the model,
// and the cost is then 0.
func Cost(model string, u Usage, overrides Prices) (usd float64, known bool) {
	pr, ok := overrides.Lookup(model)
	if !ok {
		pr, ok = listPrices.Lookup(model)
	}
	if !ok {
		return 0, false
	}
	return (float64(u.InputTokens)*pr.Input + float64(u.OutputTokens)*pr.Output) / 1e6, true
}

// ParsePrices reads prices from a flag value, either a JSON object
// ({"my-model": {"input": 0.5, "output": 1.5}}) or a list
// "model=in/out,model=in/out" in dollars per million tokens.
func ParsePrices(s string) (Prices, error) {
	s = strings.TrimSpace(s)
	p := Prices{}
	if s == "" {
		return p, nil
	}
	if strings.HasPrefix(s, "{") {
		if err := json.Unmarshal([]byte(s), &p); err != nil {
			return nil, fmt.Errorf("prices: %w", err)
		}
		return p, nil
	}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, val, ok := strings.Cut(item, "=")
		in, out, ok2 := strings.Cut(val, "/")
		if !ok || !ok2 || strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("prices: %q: want model=input/output", item)
		}
		var pr Price
		var err error
		if pr.Input, err = strconv.ParseFloat(strings.TrimSpace(in), 64); err != nil || pr.Input < 0 {
			return nil, fmt.Errorf("prices: %q: bad input price", item)
		}
		if pr.Output, err = strconv.ParseFloat(strings.TrimSpace(out), 64); err != nil || pr.Output < 0 {
			return nil, fmt.Errorf("prices: %q: bad output price", item)
		}
		p[strings.TrimSpace(name)] = pr
	}
	return p, nil
}

// LoadPrices reads prices from a JSON file of the form ParsePrices takes.
func LoadPrices(name string) (Prices, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("prices: %w", err)
	}
	var p Prices
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("prices %s: %w", name, err)
	}
	return p, nil
}
