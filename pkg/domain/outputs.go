package domain

// Bounds of a task's outputs (KubeVela's outputs: values one step passes to
// later ones). The executor fails an attempt past them; the api refuses a
// report past them.
const (
	// MaxOutputValueBytes bounds one output value: 1 MiB, so that one value
	// can list a for_each's 10,000 items (file paths, ids).
	MaxOutputValueBytes = 1 << 20
	// MaxTaskOutputBytes bounds the values of all of one task's outputs
	// together: 1 MiB.
	MaxTaskOutputBytes = 1 << 20
)

// ValidOutputName reports whether s may name an output or an input's
// variable: an environment-variable name ([A-Za-z_][A-Za-z0-9_]*), which is
// also a safe file name under $CAPSTAN_OUTPUTS_DIR and $CAPSTAN_INPUTS_DIR.
func ValidOutputName(s string) bool { return envName.MatchString(s) }
