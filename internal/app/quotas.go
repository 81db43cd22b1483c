package app

import (
	"os"
	"strconv"

	"github.com/pml-sandbox/pml/internal/capability"
	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/suspend"
)

// Environment variables of the stores' quotas: what one principal (or
// author) may keep, counted in the stores themselves so that every
// process and container sees the same count. Unset, each is its
// package's default; CLI too.
const (
	EnvSessionsPerPrincipal       = "PML_SESSIONS_PER_PRINCIPAL"        // sessions one principal holds at once (default 8)
	EnvSessionBytesPerPrincipal   = "PML_SESSION_BYTES_PER_PRINCIPAL"   // bytes of saved state of those sessions in all (default 64 MiB)
	EnvSuspendedPerPrincipal      = "PML_SUSPENDED_PER_PRINCIPAL"       // suspended executions one principal has waiting (default 50)
	EnvSuspendedBytesPerPrincipal = "PML_SUSPENDED_BYTES_PER_PRINCIPAL" // bytes of saved state of those in all (default 128 MiB)
	EnvDraftsPerAuthor            = "PML_DRAFTS_PER_AUTHOR"             // capability drafts one author has waiting (default 20)
	EnvDraftsMax                  = "PML_DRAFTS_MAX"                    // capability drafts kept in all, pending and closed (default 500)
)

// maxQuotaN bounds what a quota variable may say: a store reads a
// principal's whole ledger (and the registry every draft kept) to count.
const maxQuotaN = 100_000

// StoreQuotas reads the quotas of sessions and of suspended executions
// (zero fields: suspend's defaults).
func StoreQuotas() (sessions, suspended suspend.Quota, err error) {
	for _, q := range []struct {
		env string
		n   *int
	}{{EnvSessionsPerPrincipal, &sessions.Count}, {EnvSuspendedPerPrincipal, &suspended.Count}} {
		if *q.n, err = quotaCount(q.env); err != nil {
			return
		}
	}
	for _, q := range []struct {
		env string
		n   *int64
	}{{EnvSessionBytesPerPrincipal, &sessions.Bytes}, {EnvSuspendedBytesPerPrincipal, &suspended.Bytes}} {
		if *q.n, err = quotaBytes(q.env); err != nil {
			return
		}
	}
	return
}

// DraftLimitsFromEnv reads PML_DRAFTS_PER_AUTHOR and PML_DRAFTS_MAX (zero:
// capability's defaults).
func DraftLimitsFromEnv() (capability.DraftLimits, error) {
	var l capability.DraftLimits
	var err error
	if l.PerAuthor, err = quotaCount(EnvDraftsPerAuthor); err != nil {
		return l, err
	}
	l.Total, err = quotaCount(EnvDraftsMax)
	return l, err
}

func quotaCount(env string) (int, error) {
	v := os.Getenv(env)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxQuotaN {
		return 0, fault.New(fault.InvalidRequest, "%s must be a number from 1 to %d, not %q", env, maxQuotaN, v)
	}
	return n, nil
}

func quotaBytes(env string) (int64, error) {
	v := os.Getenv(env)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return 0, fault.New(fault.InvalidRequest, "%s must be a positive number of bytes, not %q", env, v)
	}
	return n, nil
}
