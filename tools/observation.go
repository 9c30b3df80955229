package tools

import "fmt"

// Content is one block of what the model reads: text, or an image.
type Content struct {
	Type     string `json:"type"` // "text" or "image"
	Text     string `json:"text,omitempty"`
	Data     []byte `json:"data,omitempty"` // image bytes (base64 in JSON)
	MIMEType string `json:"mimeType,omitempty"`
}

// Observation is the result of one tool call: content for the model,
// structured fields for programs, and IsError for failures the model should
// read (bad arguments, a missing file).
type Observation struct {
	Content    []Content `json:"content"`
	Structured any       `json:"structured,omitempty"`
	IsError    bool      `json:"is_error"`
}

// Text returns the concatenated text blocks.
func (o *Observation) Text() string {
	if o == nil {
		return ""
	}
	var s string
	for _, c := range o.Content {
		if c.Type == "text" {
			s += c.Text
		}
	}
	return s
}

// TextResult is a successful observation with one text block.
func TextResult(text string, structured any) *Observation {
	return &Observation{Content: []Content{{Type: "text", Text: text}}, Structured: structured}
}

// Errorf is a failed observation whose text the model reads.
func Errorf(format string, args ...any) *Observation {
	return &Observation{Content: []Content{{Type: "text", Text: fmt.Sprintf(format, args...)}}, IsError: true}
}

// ImageResult is an observation holding one image and a caption.
func ImageResult(caption, mime string, data []byte, structured any) *Observation {
	return &Observation{
		Content: []Content{
			{Type: "text", Text: caption},
			{Type: "image", Data: data, MIMEType: mime},
		},
		Structured: structured,
	}
}
