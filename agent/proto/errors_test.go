package proto

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCodes(t *testing.T) {
	for _, row := range Codes {
		we := Codes.Wire(fmt.Errorf("wrapped: %w", row.Err))
		require.ErrorIs(t, we, row.Err, "code %d must match %v", we.Code, row.Err)
	}
	assert.Equal(t, CodeInternal, Codes.Wire(errors.New("other")).Code)
}

func TestTableWithRanksRowsAfterTheGenericOnes(t *testing.T) {
	errTool := errors.New("tool")
	tab := Codes.With(Row{Code: CodeUnknownTool, Err: errTool})
	require.Len(t, tab, len(Codes)+1)
	assert.Equal(t, Row{Code: CodeUnknownTool, Err: errTool}, tab[4])
	assert.Equal(t, CodeInvalidParams, tab.Wire(fmt.Errorf("%w: %w", ErrInvalidParams, errTool)).Code)
	assert.Equal(t, CodeUnknownTool, tab.Wire(fmt.Errorf("%w: %w", ErrInternal, errTool)).Code)
	assert.Len(t, Codes, len(tab)-1, "With must not change its receiver")
}
