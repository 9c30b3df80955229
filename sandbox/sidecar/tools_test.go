package sidecar

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestExposedToolName(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	assert.Equal(t, "memory__create_entities", ExposedToolName("memory", "create_entities"))

	long := strings.Repeat("x", 90)
	got := ExposedToolName("memory", long)
	assert.Len(t, got, MaxToolName)
	assert.Regexp(t, re, got)
	assert.True(t, strings.HasPrefix(got, "memory__xxx"))
	assert.NotEqual(t, got, ExposedToolName("memory", long+"y"), "the hash keeps cut names apart")
	assert.Equal(t, got, ExposedToolName("memory", long), "and is stable")

	dotted := ExposedToolName("db", "a.b")
	assert.Regexp(t, re, dotted)
	assert.True(t, strings.HasPrefix(dotted, "db__a_b_"))
	assert.NotEqual(t, "db__a_b", dotted, "a changed name is told apart from a tool really named a_b")
}
