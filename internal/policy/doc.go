// Package policy is the deployment's one policy set: Cedar policies
// (cedar-go) that decide every tool call (action call: the principal, the
// tool in its server, the call's arguments and facts) and every decision
// about an execution or a capability (approve, answer, reject, read,
// publish, consent, oversee, trustClient), validated when they are loaded
// against the schema shipped here, so that a typo is an error at start and
// never a silent allow.
//
// Without a policy file the set is generated from the switches the
// deployment always had (Default), so nothing changes until an operator
// writes one; internal/approval's decisions are requests to it. A call the
// set denies as it stands and would permit approved is asked of a person;
// limits over time are annotations on permit policies (@limit, @sum),
// counted before a call is sent (Gate, Counter; the counts are
// internal/policy/usage's). Where a set comes from is
// internal/policy/source's; evaluation by Amazon Verified Permissions is
// internal/policy/avp's. docs/POLICY.md is the operator's reference.
package policy
