package executor

import (
	"os"

	"github.com/coopgrid/coopgrid/executor/internal/supervise"
)

// LandlockMode: when tasks running as the peer's user get a sandbox.
type LandlockMode string

// Landlock modes of ProcessConfig.
const (
	LandlockAuto   LandlockMode = ""
	LandlockAlways LandlockMode = "always"
	LandlockOff    LandlockMode = "off"
)

// sandboxed says whether tasks without run_as run in the Landlock sandbox.
func (cfg *ProcessConfig) sandboxed() bool {
	switch cfg.Landlock {
	case LandlockOff:
		return false
	case LandlockAuto:
		if os.Geteuid() == 0 {
			return false
		}
	}
	return supervise.LandlockABI() >= 1
}
