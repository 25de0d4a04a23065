"""The service gateway (`corral gateway`): one stable endpoint per service, `/s/<service>/<path>`, proxied to
the service's ready replicas by least in-flight requests (docs/decisions/0018-service-gateway.md).

Modules: `routes` (the route table: each service's endpoints and their in-flight counts), `sources` (where
endpoints come from: the `EndpointSource` interface and a static source), `controller` (the controller's
HTTP API, leader following), `controller_source` (endpoints long-polled from the controller), `auth` (Bearer
credentials checked against the controller, cached briefly), `proxy` (HTTP forwarding with retries and
streaming), `websocket`, `metrics` (Prometheus), `load` (per-service load reports for the autoscaler),
`server` (the aiohttp application that ties them together), `main` (the `corral gateway` command)."""
