"""CDK entry point: builds the kindex stack from `infra/`, configured only by cdk.json context."""

import aws_cdk as cdk

from infra.stack import KindexStack

app = cdk.App()
KindexStack(app, f"kindex-{app.node.try_get_context('stage') or 'dev'}")
app.synth()
