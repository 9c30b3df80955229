package docker

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

var testTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
