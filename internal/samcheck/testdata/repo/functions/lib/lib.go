// Package lib is no main package.
package lib
