// Package deploy holds Capstan's deployment files and the tests that check
// them without a container engine: deploy/docker (the images),
// ../docker-compose.yml (one machine) and deploy/k8s (a cluster).
//
// The tests load the compose file with compose-go, the loader docker compose
// itself uses; decode every Kubernetes manifest strictly into its typed
// object, so that an unknown or misspelt field fails; and parse the
// Dockerfiles with BuildKit's own parser.
package deploy
