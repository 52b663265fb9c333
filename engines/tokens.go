package engines

import (
	"context"
	"fmt"
	"net/http"
)

// tokenizeKinds are the engines with a POST /tokenize.
var tokenizeKinds = map[string]bool{KindVLLM: true, KindSGLang: true, KindLlamaCpp: true, KindTGI: true}

// calibrationText is what the one-off max_tokens:1 request per API carries
// to learn how far /tokenize's count is from usage.prompt_tokens (the chat
// template, a BOS token).
const calibrationText = "Count these words for tokentap calibration."

// CountTokens returns the number of prompt tokens the engine will report in
// usage.prompt_tokens for a request carrying text: as the prompt of
// /v1/completions (api "completions"), or as the one user message of
// /v1/chat/completions (api "chat").
//
// Where the engine has POST /tokenize (Info.Tokenize), the count comes from
// it, plus a constant learned once per API from one max_tokens:1 request
// (usage.prompt_tokens − /tokenize count: chat template, special tokens).
// vLLM tokenizes chat messages itself, template included. Elsewhere each
// call sends a max_tokens:1 request with text and reads usage.prompt_tokens.
// Safe for concurrent use.
func (in *Info) CountTokens(ctx context.Context, api, text string) (int, error) {
	if api != APIChat && api != APICompletions {
		return 0, fmt.Errorf("CountTokens: api %q: want %q or %q", api, APIChat, APICompletions)
	}
	if in.c == nil {
		return 0, fmt.Errorf("CountTokens: this Info was not made by Probe")
	}
	if !in.Tokenize {
		return in.usageCount(ctx, api, text)
	}
	off, err := in.offset(ctx, api)
	if err != nil {
		return 0, err
	}
	n, err := in.tokenizeAPI(ctx, api, text)
	if err != nil {
		return 0, err
	}
	return n + off, nil
}

// offset learns, once per API, usage.prompt_tokens − the /tokenize count.
func (in *Info) offset(ctx context.Context, api string) (int, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if off, ok := in.offsets[api]; ok {
		return off, nil
	}
	tok, err := in.tokenizeAPI(ctx, api, calibrationText)
	if err != nil {
		return 0, err
	}
	used, err := in.usageCount(ctx, api, calibrationText)
	if err != nil {
		return 0, fmt.Errorf("calibrating /tokenize against usage.prompt_tokens: %w", err)
	}
	if in.offsets == nil {
		in.offsets = map[string]int{}
	}
	in.offsets[api] = used - tok
	return used - tok, nil
}

// tokenizeAPI counts text with /tokenize the way the request API would
// carry it (vLLM applies the chat template to messages itself; elsewhere
// the template is the calibrated offset).
func (in *Info) tokenizeAPI(ctx context.Context, api, text string) (int, error) {
	if in.Kind == KindVLLM && api == APIChat {
		return in.tokenizeBody(ctx, map[string]any{
			"model":                 in.Model,
			"messages":              []map[string]string{{"role": "user", "content": text}},
			"add_generation_prompt": true,
		})
	}
	return in.tokenize(ctx, text)
}

// tokenize counts text as a raw prompt with the engine's POST /tokenize.
func (in *Info) tokenize(ctx context.Context, text string) (int, error) {
	var body any
	switch in.Kind {
	case KindLlamaCpp:
		body = map[string]any{"content": text, "add_special": true, "parse_special": true}
	case KindTGI:
		body = map[string]any{"inputs": text}
	default: // vLLM, SGLang
		body = map[string]any{"model": in.Model, "prompt": text}
	}
	return in.tokenizeBody(ctx, body)
}

func (in *Info) tokenizeBody(ctx context.Context, body any) (int, error) {
	r, err := in.c.do(ctx, http.MethodPost, "/tokenize", body)
	if err != nil {
		return 0, err
	}
	if r.status == http.StatusUnauthorized || r.status == http.StatusForbidden {
		return 0, in.c.authError("POST /tokenize", r.status)
	}
	if !r.ok() {
		return 0, fmt.Errorf("POST %s/tokenize: HTTP %d: %s", in.BaseURL, r.status, r.excerpt())
	}
	n, ok := parseTokenCount(r.body)
	if !ok {
		return 0, fmt.Errorf("POST %s/tokenize answered without a token count: %s", in.BaseURL, r.excerpt())
	}
	return n, nil
}

// usageCount sends text in a max_tokens:1 request and reads
// usage.prompt_tokens.
func (in *Info) usageCount(ctx context.Context, api, text string) (int, error) {
	path := "/v1/completions"
	body := map[string]any{"model": in.Model, "max_tokens": 1, "stream": false, "temperature": 0}
	if api == APIChat {
		path = "/v1/chat/completions"
		body["messages"] = []map[string]string{{"role": "user", "content": text}}
	} else {
		body["prompt"] = text
	}
	r, err := in.c.do(ctx, http.MethodPost, path, body)
	if err != nil {
		return 0, err
	}
	if r.status == http.StatusUnauthorized || r.status == http.StatusForbidden {
		return 0, in.c.authError("POST "+path, r.status)
	}
	if !r.ok() {
		return 0, fmt.Errorf("POST %s%s (max_tokens 1, to count prompt tokens): HTTP %d: %s", in.BaseURL, path, r.status, r.excerpt())
	}
	n, ok := parseUsagePromptTokens(r.body)
	if !ok {
		return 0, fmt.Errorf("POST %s%s answered without usage.prompt_tokens, so prompt tokens cannot be counted: %s", in.BaseURL, path, r.excerpt())
	}
	return n, nil
}
