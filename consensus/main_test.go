package consensus

import (
	"testing"

	"github.com/coopgrid/coopgrid/internal/testcluster"
)

func TestMain(m *testing.M) { testcluster.Main(m) }
