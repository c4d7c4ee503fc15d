package supervise

import "strings"

// Variables that make a program load or run code it was not asked to: the
// dynamic loader's and glibc's, and the start-up hooks of the shells and
// interpreters an owner is likely to allow. With one of them a job could
// run its own code inside an allowed program (LD_PRELOAD of a library
// shipped as an input, a PYTHONSTARTUP file, BASH_ENV...), which is exactly
// what the allow list forbids. A job that sets one gets bad_spec (refused,
// so the job's author learns it at once), and the task init strips them
// again before the execve (defence in depth: nothing else should have put
// them there). docs/EXECUTOR.md lists them.
var loaderEnvExact = map[string]bool{
	// glibc: character-set modules, tunables (CVE-2023-4911), locale and
	// message catalogues, resolver and malloc hooks.
	"GCONV_PATH": true, "GLIBC_TUNABLES": true, "GETCONF_DIR": true,
	"HOSTALIASES": true, "LOCALDOMAIN": true, "LOCPATH": true,
	"MALLOC_TRACE": true, "NIS_PATH": true, "NLSPATH": true,
	"RESOLV_HOST_CONF": true, "RES_OPTIONS": true, "TZDIR": true,
	// Shells.
	"BASH_ENV": true, "ENV": true, "SHELLOPTS": true, "BASHOPTS": true,
	"PS4": true, "PROMPT_COMMAND": true,
	// Interpreters and runtimes.
	"PYTHONSTARTUP": true, "PYTHONPATH": true, "PYTHONHOME": true,
	"PYTHONUSERBASE": true, "PYTHONINSPECT": true, "PYTHONBREAKPOINT": true,
	"PERL5OPT": true, "PERL5LIB": true, "PERLLIB": true, "PERL5DB": true,
	"RUBYOPT": true, "RUBYLIB": true,
	"NODE_OPTIONS": true, "NODE_PATH": true,
	"JAVA_TOOL_OPTIONS": true, "_JAVA_OPTIONS": true, "JDK_JAVA_OPTIONS": true,
	"R_PROFILE": true, "R_PROFILE_USER": true, "R_ENVIRON": true, "R_ENVIRON_USER": true,
	"LUA_INIT": true, "LUA_PATH": true, "LUA_CPATH": true,
	"TCLLIBPATH": true, "OCTAVE_SITE_INITFILE": true,
}

// loaderEnvPrefixes: every variable of these families.
var loaderEnvPrefixes = []string{
	"LD_",        // LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, LD_DEBUG_OUTPUT...
	"MALLOC_",    // glibc malloc tunables (MALLOC_CHECK_, ...)
	"BASH_FUNC_", // exported shell functions
}

// LoaderEnv reports whether k may make a program load foreign code.
func LoaderEnv(k string) bool {
	if loaderEnvExact[k] {
		return true
	}
	for _, p := range loaderEnvPrefixes {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// StripLoaderEnv drops the loader variables from a KEY=VALUE list.
func StripLoaderEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !LoaderEnv(k) {
			out = append(out, kv)
		}
	}
	return out
}
