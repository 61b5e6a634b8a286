package pack_test

import (
	"testing"

	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

func TestMain(m *testing.M) { sandboxtest.Main(m) }
