package executor

import (
	"context"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
)

// panickingCompiler is a compiler whose CompileModule panics, as wazero's
// does on some invalid modules.
type panickingCompiler struct{}

func (panickingCompiler) CompileModule(context.Context, []byte) (wazero.CompiledModule, error) {
	var types []int
	_ = types[73] // index out of range, like wazero v1.12's validator
	return nil, nil
}

// TestCompileModuleRecovers: a panic inside wazero's CompileModule comes
// back as an error, not as the end of the process.
func TestCompileModuleRecovers(t *testing.T) {
	cm, err := compileModule(context.Background(), panickingCompiler{}, nil)
	if cm != nil || err == nil || !strings.Contains(err.Error(), "index out of range") {
		t.Fatalf("compileModule = %v, %v; want the panic as an error", cm, err)
	}
}
