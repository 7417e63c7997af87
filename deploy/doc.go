// Package deploy holds Capstan's deployment files and the tests that check
// them without a container engine: deploy/docker (the images),
// ../docker-compose.yml (one machine), deploy/k8s (a kustomize base and
// the overlays dev and prod) and deploy/helm/capstan (a Helm chart of the
// prod deployment).
//
// The tests load the compose file with compose-go, the loader docker compose
// itself uses; build each overlay with kustomize's own library (what
// `kubectl apply -k` runs) and decode every object strictly into its typed
// Kubernetes object, so that an unknown or misspelt field fails; parse the
// Dockerfiles with BuildKit's own parser; render the chart with Helm's own
// loader and engine and compare it with the prod overlay; and read the
// services' Go source for the environment variables they take (their
// `env:"…"` struct tags), so that a setting added to a service must be given
// by every deployment or have a documented default.
package deploy
