//go:build tools

// Package tools keeps go.mod and go.sum complete for `go build sigs.k8s.io/karpenter/kwok`: a main
// package cannot be imported, so these are the packages that main package imports.
package tools

import (
	_ "sigs.k8s.io/karpenter/kwok/cloudprovider"
	_ "sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	_ "sigs.k8s.io/karpenter/pkg/controllers"
	_ "sigs.k8s.io/karpenter/pkg/controllers/node/health"
	_ "sigs.k8s.io/karpenter/pkg/controllers/state"
	_ "sigs.k8s.io/karpenter/pkg/operator"
)
