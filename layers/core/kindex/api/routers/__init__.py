"""The API's routes, one router per resource. Each route parses, checks the caller's role, calls one service
method (the services are a dependency, handed over by the function that serves the router) and shapes the answer."""
