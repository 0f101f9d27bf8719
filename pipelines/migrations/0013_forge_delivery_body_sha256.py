"""A webhook delivery is known by its body's SHA-256 (what the signature covers), not by
the delivery id the forges do not sign. Deliveries recorded before have no body kept:
each gets a digest of its old id, unique as the id was, that no body can have in practice."""

import hashlib

from django.db import migrations, models


def digest_the_old_ids(apps, schema_editor):  # type: ignore[no-untyped-def]
    ForgeDelivery = apps.get_model("pipelines", "ForgeDelivery")
    for delivery in ForgeDelivery.objects.all().only("pk", "delivery_id").iterator():
        legacy = hashlib.sha256(f"delivery id recorded before bodies were: {delivery.delivery_id}".encode()).hexdigest()
        ForgeDelivery.objects.filter(pk=delivery.pk).update(body_sha256=legacy)


class Migration(migrations.Migration):

    dependencies = [
        ('pipelines', '0012_run_line_comments'),
    ]

    operations = [
        migrations.AddField(
            model_name='forgedelivery',
            name='body_sha256',
            field=models.CharField(default='', max_length=64),
            preserve_default=False,
        ),
        migrations.RunPython(digest_the_old_ids, migrations.RunPython.noop),
        migrations.RemoveConstraint(
            model_name='forgedelivery',
            name='pipelines_forge_delivery_once',
        ),
        migrations.AlterField(
            model_name='forgedelivery',
            name='delivery_id',
            field=models.CharField(blank=True, max_length=100),
        ),
        migrations.AddConstraint(
            model_name='forgedelivery',
            constraint=models.UniqueConstraint(fields=('repository', 'body_sha256'), name='pipelines_forge_delivery_body_once'),
        ),
    ]
